"""A new home's MLflow database: MLflow's own, made once per MLflow version into the cache and copied for each home."""

import sqlite3
from contextlib import closing

import mlflow

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources.registry import CHAMPION, ModelRegistry
from rmi_pipeline.settings import DEFAULT_RECIPE


def schema(path) -> dict:
    """Each table's columns and each index's name, and the migration the database is at (the text of a table's
    CREATE statement lists its CHECK constraints in an order that varies from one making to the next)."""
    with closing(sqlite3.connect(path)) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {"columns": {t: db.execute(f"PRAGMA table_info('{t}')").fetchall() for t in tables},
                "indexes": sorted(db.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'")),
                "migration": db.execute("SELECT version_num FROM alembic_version").fetchall()}


def test_homes_made_from_the_cached_database_work_as_one_mlflow_made_itself(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "cache"
    weights = ArithmeticRecipe().checkpoint(ArithmeticRecipe().build_model(0.0, 1))
    homes = {name: tmp_path / name for name in ("first", "second", "mlflow's own")}
    for name, home in homes.items():
        registry = ModelRegistry(tracking_uri=f"sqlite:///{home / 'mlflow.db'}", artifact_root=f"file://{home / 'art'}",
                                 model_name="m", cache_dir=None if name == "mlflow's own" else str(cache))
        with registry.run("candidate", tags={}) as run_id:
            registry.register_model(run_id, weights, DEFAULT_RECIPE, tags={})
        registry.promote("1", {"promoted_by": "gate"})
        assert str(registry.version(CHAMPION).version) == "1" and registry.champion_history() == ["1"]
        default = registry.client().get_experiment("0")
        assert default.name == "Default" and default.artifact_location == str(tmp_path / "mlruns" / "0")
    assert [p.name for p in cache.iterdir()] == [f"mlflow-{mlflow.__version__}.db"]  # made once, no leftovers
    assert schema(homes["first"] / "mlflow.db") == schema(homes["second"] / "mlflow.db") \
        == schema(homes["mlflow's own"] / "mlflow.db")
