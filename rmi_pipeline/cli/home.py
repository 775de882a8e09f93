"""RMI_HOME: the folder that holds the loop's state, with Dagster's instance inside it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..resources import layout
from ..settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]  # a checkout's root, where dagster.yaml is
# serve/: the gateway's log, whose events belong to the old store; alerts_sent.json: alerts an old run raised,
# whose keys (champion v1, v2, ...) the new run's alerts would repeat and so never be sent
STATE = ("store", "dagster", "mlartifacts", "mlflow.db", "warehouse.sqlite", "warehouse.sqlite-journal",
         "warehouse_files", "learning_curve.png", "run_summary.json", "serve", "serve.log", "world.log",
         "alerts_sent.json")
# the eval sets the loop wrote: tiers an earlier run's champions grew would face a fresh loop's first model
EVAL_STATE = (layout.GROWN, layout.REFRESHED, layout.MINED, layout.ANSWERS)


def prepare_home(settings: Settings, fresh: bool = False) -> Path:
    """RMI_HOME with Dagster's instance inside it; `fresh` removes only what the loop itself wrote."""
    home = settings.resolved_home
    template = REPO_ROOT / "dagster.yaml"
    if settings.dagster_yaml is not None:  # e.g. deploy/dagster.yaml: its env vars stay env vars, read by Dagster
        template = settings.dagster_yaml.expanduser()
        if not template.is_file():
            raise FileNotFoundError(f"RMI_DAGSTER_YAML={template} is not a file")
    if fresh:
        targets = [home / name for name in STATE]
        if settings.evals.url is None:  # the eval store in RMI_HOME; one set elsewhere is not only this loop's
            targets += [home / "evals" / name for name in EVAL_STATE] + _simulated_anchor(home / "evals")
        for target in targets:
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    settings.dagster_home.mkdir(parents=True, exist_ok=True)
    config = settings.dagster_home / "dagster.yaml"
    text = template.read_text() if template.exists() else None  # outside a checkout: keep the one there is
    if text is None and not config.exists():
        text = "telemetry:\n  enabled: false\n"
    if text is not None and (not config.exists() or config.read_text() != text):
        # written aside and moved into place: another rmi process may be reading it
        partial = config.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(text)
        partial.replace(config)
    os.environ["RMI_HOME"] = str(home)  # runs and `dagster dev` children see the same settings
    os.environ["DAGSTER_HOME"] = str(settings.dagster_home)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    _create_instance_once(settings.dagster_home)
    return home


def _create_instance_once(dagster_home: Path) -> None:
    """Dagster creates its sqlite storage on first use; two `rmi` processes doing that at once on a new home race
    in its migrations, so the first one creates it under a lock and the others find it made. A database server
    (the production profile) is left to its own migrations."""
    import yaml
    from filelock import FileLock

    config = yaml.safe_load((dagster_home / "dagster.yaml").read_text()) or {}
    if {"run_storage", "event_log_storage"} & set(config) or {"postgres", "mysql"} & set(config.get("storage") or {}):
        return
    with FileLock(dagster_home / ".created.lock"):
        if (dagster_home / ".created").exists():
            return
        from dagster import DagsterInstance

        DagsterInstance.get().dispose()  # opening every storage creates it
        (dagster_home / ".created").touch()


def reach_stores(resources) -> None:
    """One clear line and exit 1 at once when the feedback or the eval store cannot be reached."""
    for store in ("storage", "eval_store"):
        resources[store].reach()


def say(message: str) -> None:
    print(message, flush=True)


def _simulated_anchor(evals: Path) -> list[Path]:
    """The anchor suite, when the simulated world's curators wrote it (an older code's or seed's tiers otherwise
    stay); a suite people curated is theirs."""
    anchor = evals / layout.ANCHOR
    try:
        return [anchor] if json.loads(anchor.read_text()).get("curated_by") == layout.SIMULATED_CURATORS else []
    except (OSError, ValueError):
        return []


def server_logging() -> None:
    """A long-running server's log lines (`rmi serve`, `rmi chat`): time, level, logger; libraries' chatter off."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("mlflow", "alembic", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_server(app, host: str, port: int, ready: str, access_log: bool = False) -> int:
    """Say where the server answers, then serve until Ctrl-C; requests in flight get 10 s to finish."""
    import uvicorn

    say(ready)
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=access_log, timeout_graceful_shutdown=10)
    return 0
