"""Shared fixtures: a throwaway RMI_HOME with small, fast settings, and one real loop run to inspect."""

import json
import os
import signal

# torch's OpenMP threads spin while they wait; on shared cores that slows in-process training ~25x
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# one torch thread a process, here and in every program a test starts: `make test` runs three workers on two cores, so
# a second thread only waits on the other workers (a small model's training step then costs a fifth to a half more CPU)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

# the world these tests' figures were measured in: users who rate every answer and correct 60% of their thumbs-down
# on wrong ones, not the production-like defaults (10%, 5%); tests of that world set its shares themselves
# (tests/test_world_users.py)
RATES_EVERY_ANSWER = {"RMI_SIM_RATING_SHARE": "1.0", "RMI_SIM_CORRECTION_SHARE": "0.6"}

FAST = {
    **RATES_EVERY_ANSWER,
    "RMI_TRAIN_STEPS": "1000",
    "RMI_SIM_QUERIES_PER_CYCLE": "2000",
    "RMI_EVAL_ITEMS_PER_SLICE": "40",
    "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE": "40",
    # the champion's own sources stay on (the default mix), on fewer problems
    "RMI_PRACTICE_PROBLEMS": "200",
    "RMI_SELF_LABEL_PROBLEMS": "200",
    "RMI_SAMPLE_ROLLOUTS": "4",
    "RMI_PRACTICE_FAILED_PROMPTS": "100",
    # the reward model's picks are one source among five here; test_task_loop and test_reward_model test it
    "RMI_REWARD_STEPS": "50",
    "RMI_REWARD_PROMPTS": "100",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "RMI_TRAIN_WORKER_IDLE_SECONDS": "120",  # a test's warm training worker goes soon after (and see below)
}


@pytest.fixture(scope="session", autouse=True)
def no_training_worker_left(tmp_path_factory):
    """The warm training workers of this session's homes are stopped by their pid files when it ends."""
    yield
    from rmi_pipeline.training.worker import stop

    for folder in tmp_path_factory.getbasetemp().rglob("training_worker"):
        stop(folder)


@pytest.fixture
def rmi_env(tmp_path, monkeypatch):
    """An empty RMI_HOME with fast settings; returns the Settings the pipeline will read."""
    from rmi_pipeline.settings import Settings

    monkeypatch.setenv("RMI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster"))
    for key, value in FAST.items():
        monkeypatch.setenv(key, value)
    return Settings()


@pytest.fixture(scope="module")
def one_duckdb_thread():
    """The feedback suite's checks on the small batches of a fuzz run take a third less time on one DuckDB thread than
    on a thread per core, which wait on each other (and on the other worker's tests) at every statement."""
    from rmi_pipeline.schema.expectations import _database

    _database().execute("SET threads = 1")
    yield
    _database().execute("RESET threads")


# the loop run's own: a first model of 1,000 steps (not the default 2,000) is all its tests need, a weaker champion its
# cycle beats with room to spare (gain +0.233, 98% interval from +0.217); the cycle keeps FAST's 1,000 steps, which
# tests/test_ddp.py repeats in two processes: at 500 seed 0 gained +0.15 and seed 1's two processes fell 0.08 short
# of one, too near the quarter of the gain that test allows
LOOP_STEPS = {"RMI_TRAIN_BOOTSTRAP_STEPS": "1000"}


@pytest.fixture(scope="session")
def loop_home(tmp_path_factory):
    """RMI_HOME after `rmi run --cycles 1`: a first model, one batch of feedback, one improvement cycle."""
    from rmi_pipeline.cli.main import main

    home = tmp_path_factory.mktemp("loop") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RMI_HOME", str(home))
        for key, value in {**FAST, **LOOP_STEPS}.items():
            mp.setenv(key, value)
        code = main(["run", "--cycles", "1", "--fresh"])
        summary = json.loads((home / "run_summary.json").read_text())
    os.environ.pop("DAGSTER_HOME", None)  # main() exported it for its own runs
    return {"home": home, "exit_code": code, "summary": summary}


@pytest.fixture(scope="module")
def served(loop_home, tmp_path_factory):
    """A home of its own whose registry is a copy of the loop's (its two trained versions; aliases move here only,
    version 1 is champion), with a warehouse, a Dagster instance and the environment of a gateway over it."""
    import shutil

    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.settings import Settings

    home = tmp_path_factory.mktemp("served") / "home"
    home.mkdir()
    shutil.copyfile(loop_home["home"] / "mlflow.db", home / "mlflow.db")
    env = {"RMI_HOME": str(home), "MLFLOW_DISABLE_TELEMETRY": "true", "RMI_SERVE_RELOAD_SECONDS": "0.3",
           "DAGSTER_HOME": str(home / "dagster")}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        settings = Settings()
    prepare_home(settings)
    registry = build_resources(settings)["registry"]
    registry.promote("1", {"promoted_by": "test"})
    return {"home": home, "env": env, "settings": settings, "registry": registry}


# The files whose tests inspect the one real loop run (loop_home, served). Under `pytest -n` (make test) each file
# runs on one worker, so its module fixtures are built once, and these files all on the same one, so the loop runs
# once. (xdist's own `loadgroup` marks do nothing under pytest 9: it renames `item._nodeid`, which pytest 9 no
# longer reads.)
LOOP_FILES = {"test_browser.py", "test_canary_live.py", "test_challengers_loop.py", "test_cli.py", "test_ddp.py",
              "test_generations_loop.py", "test_loop.py", "test_serving.py"}


def pytest_configure(config):
    """Tests press Ctrl-C on the programs they start, as a person at a terminal would. A test run started in the
    background by a non-interactive shell (`make test &`, as some CI runners do) inherits SIGINT ignored, passes that
    on to every program it starts, and Python keeps it: Ctrl-C then stops nothing, rightly. Start them as a terminal
    would."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return "loop" if file.rsplit("/", 1)[-1] in LOOP_FILES else file

    return ByFile(config, log)


def pytest_collection_modifyitems(items):
    """A test on the loop run outside LOOP_FILES would run the loop a second time: say so instead."""
    for item in items:
        if {"loop_home", "served"} & set(getattr(item, "fixturenames", ())) and item.path.name not in LOOP_FILES:
            raise pytest.UsageError(f"{item.nodeid} uses the loop run: add {item.path.name} to LOOP_FILES "
                                    "in tests/conftest.py")
