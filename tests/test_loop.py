"""The whole loop, for real: world -> feedback -> Dagster -> Lightning -> MLflow aliases, in a temporary home.

One `rmi run --cycles 1` (a first model, then one improvement cycle) is shared by these tests.
"""

import json
import random

import pytest
from dagster import DagsterInstance, instance_for_test, materialize

from rmi_pipeline.assets import candidate_evaluation, champion
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources
from rmi_pipeline.settings import Settings


@pytest.fixture
def loop(loop_home, monkeypatch):
    monkeypatch.setenv("RMI_HOME", str(loop_home["home"]))
    settings = Settings()
    return loop_home | {"settings": settings, **build_resources(settings)}


def test_the_first_model_is_promoted_and_a_better_challenger_takes_over(loop):
    first, second = loop["summary"]
    assert loop["exit_code"] == 0
    assert first["verdict"] == "promote" and first["champion_version"] == first["challenger_version"] == 1
    assert second["challenger_version"] == 2
    assert second["verdict"] == "promote", second["reason"]
    assert second["champion"]["mean"] > first["champion"]["mean"]
    registry = loop["registry"]
    assert registry.version("champion").version == 2
    assert registry.version("champion").tags["gate_verdict"] == "promote"


def test_feedback_reached_the_warehouse_and_every_row_is_accounted_for(loop):
    ingest = loop["summary"][1]["ingest"]
    assert ingest["batches"] == 1 and ingest["failed"] == 0
    assert ingest["rows_in"] == ingest["ingested"] + ingest["duplicates"] + ingest["quarantined"]
    assert ingest["quarantined"] >= 1  # the world's buggy client garbles a few lines
    events = loop["warehouse"].query("SELECT count(*) AS n FROM feedback_events")["n"][0]
    assert events == ingest["ingested"]


def test_a_model_leads_back_to_its_dataset_batches_and_run(loop):
    mv = loop["registry"].version("champion")
    storage = loop["storage"]
    manifest = storage.read_json(f"datasets/{mv.tags['dataset_version']}/manifest.json")
    assert mv.tags["feedback_batches"] == ",".join(manifest["batches"]) and len(manifest["batches"]) == 1
    assert storage.exists(f"feedback/incoming/{manifest['batches'][0]}")
    assert mv.tags["warm_start_from"] == "1" and mv.tags["code_version"]
    instance = DagsterInstance.from_config(str(loop["settings"].dagster_home))
    run = instance.get_run_by_id(mv.tags["dagster_run_id"])
    assert run.job_name == "improvement_cycle" and run.tags["rmi/cycle"] == "1"


def test_a_random_weights_challenger_is_not_promoted_and_the_champion_stays(loop):
    registry, storage = loop["registry"], loop["storage"]
    before = registry.version("champion").version
    recipe = ArithmeticRecipe()
    random.seed(0)
    broken = recipe.build_model(learning_rate=0.0, max_steps=1)
    with registry.run("broken", tags={}) as run_id:
        broken_version = registry.register(run_id, broken, tags={"dataset_version": "none"}).version
    assert registry.version("challenger").version == broken_version
    with instance_for_test() as instance:
        result = materialize([candidate_evaluation, champion], instance=instance,
                             resources={k: loop[k] for k in ("storage", "registry")})
    assert result.success
    promoted = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "champion"]
    assert promoted == []
    report = json.loads(storage.read_bytes(f"evaluations/v{broken_version}.json"))
    assert report["decision"]["promote"] is False and report["decision"]["gain"] < 0
    assert registry.version("champion").version == before
