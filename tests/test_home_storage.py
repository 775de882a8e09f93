"""The home's Dagster storage keeps its sqlite connections open, and the UI still sees what it saw before: every
event of a run while it runs, runs written by either storage, and no more open files however many runs it reads."""

import os
import time
import uuid
from pathlib import Path

import pytest

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@pytest.fixture
def instance(rmi_env):
    from dagster import DagsterInstance

    from rmi_pipeline.automation.home_storage import KeptEventLogStorage
    from rmi_pipeline.cli.home import prepare_home

    prepare_home(rmi_env)
    instance = DagsterInstance.get()
    assert isinstance(instance.event_log_storage, KeptEventLogStorage)  # the home's dagster.yaml names it
    yield instance
    instance.dispose()


def _job(step=None):
    from dagster import Definitions, asset, define_asset_job

    @asset
    def answer():
        if step is not None:
            step()
        return 42

    return Definitions(assets=[answer], jobs=[define_asset_job("answer_job")]).resolve_job_def("answer_job")


def test_another_instances_watcher_sees_every_event_of_a_run_as_it_is_written(instance):
    """The UI's live run view (the webserver's instance watching a run another process writes): Dagster's watcher
    waits for the run's database file to change, which a kept connection alone would not do until its WAL filled
    (the watcher then saw 1 of the run's 14 events)."""
    from dagster import DagsterInstance

    seen, run_id, live = [], str(uuid.uuid4()), []
    watcher = DagsterInstance.get()  # an instance of its own, with its own connections and file watcher
    watcher.watch_event_logs(run_id, None,
                             lambda entry, cursor: seen.append(getattr(entry.dagster_event_type, "value", "log")))

    def step():  # the watcher has seen the step start while it runs
        deadline = time.monotonic() + 10
        while "STEP_START" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        live.append("STEP_START" in seen)

    assert _job(step).execute_in_process(instance=instance, run_id=run_id, run_config=QUIET).success
    stored = len(instance.all_logs(run_id))
    deadline = time.monotonic() + 10
    while len(seen) < stored and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live == [True] and len(seen) == stored, f"the watcher saw {len(seen)} of the run's {stored} events"
    watcher.dispose()


def test_an_instance_loaded_from_a_homes_folder_is_that_home_whatever_DAGSTER_HOME_says(instance, rmi_env,
                                                                                        tmp_path, monkeypatch):
    from dagster import DagsterInstance

    run_id = _job().execute_in_process(instance=instance, run_config=QUIET).run_id
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "another home"))
    with DagsterInstance.from_config(str(rmi_env.dagster_home)) as loaded:
        assert [r.run_id for r in loaded.get_runs()] == [run_id]
        assert Path(loaded.compute_log_manager._base_dir).parent == rmi_env.dagster_home


def test_a_home_written_by_it_reads_the_same_with_dagsters_own_storage(instance, rmi_env):
    from dagster._core.storage.sqlite_storage import DagsterSqliteStorage

    result = _job().execute_in_process(instance=instance, run_config=QUIET)
    stock = DagsterSqliteStorage.from_local(str(rmi_env.dagster_home))
    assert [r.run_id for r in stock.run_storage.get_runs()] == [result.run_id]
    assert len(stock.event_log_storage.get_logs_for_run(result.run_id)) == len(instance.all_logs(result.run_id))
    stock.dispose()


def test_a_new_runs_log_has_the_tables_indexes_and_stamp_dagster_gives_one(instance, rmi_env):
    """A run's log starts as a copy of an empty one, not from Dagster's own set-up: the same database either way."""
    import sqlite3

    from dagster._core.storage.event_log import SqliteEventLogStorage
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME

    ours = instance.event_log_storage
    stock = SqliteEventLogStorage(str(Path(ours.path_for_shard(INDEX_SHARD_NAME)).parent))
    copied, made = str(uuid.uuid4()), str(uuid.uuid4())
    for storage, run_id in ((ours, copied), (stock, made)):
        with storage.run_connection(run_id):
            pass

    def described(run_id):
        db = sqlite3.connect(ours.path_for_shard(run_id))
        try:
            return (db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall(),
                    db.execute("SELECT version_num FROM alembic_version").fetchall(),
                    db.execute("PRAGMA journal_mode").fetchall())
        finally:
            db.close()

    tables, stamp, journal = described(copied)
    assert (tables, stamp, journal) == described(made) and stamp and journal == [("wal",)]
    assert not list(Path(ours.path_for_shard(copied)).parent.glob("*.partial"))


RUN_THAT_SPEAKS = """
import subprocess, sys
from dagster import DagsterInstance, Definitions, asset, define_asset_job

@asset
def speaks():
    print("said in the step", flush=True)
    subprocess.run(["sh", "-c", "echo said by a child; echo warned by a child >&2"], check=True)
    print("warned in the step", file=sys.stderr, flush=True)

job = Definitions(assets=[speaks], jobs=[define_asset_job("speaks_job")]).resolve_job_def("speaks_job")
print(job.execute_in_process(instance=DagsterInstance.get()).run_id)
"""


def test_a_runs_stdout_and_stderr_are_its_compute_logs_and_still_reach_the_terminal(instance):
    """The UI's stdout and stderr tabs of a run, with what its child processes wrote; the terminal that started
    it (here a pipe) saw them too."""
    import subprocess
    import sys

    from dagster import DagsterEventType
    from dagster._core.storage.compute_log_manager import ComputeIOType

    from rmi_pipeline.automation.home_storage import HomeComputeLogs

    shown = subprocess.run([sys.executable, "-c", RUN_THAT_SPEAKS], capture_output=True, text=True, timeout=120,
                           check=True)
    run_id = shown.stdout.split()[-1]
    logs = instance.compute_log_manager
    assert isinstance(logs, HomeComputeLogs)
    captured = instance.all_logs(run_id, of_type=DagsterEventType.LOGS_CAPTURED)[0]
    key = logs.build_log_key_for_run(run_id, captured.dagster_event.logs_captured_data.file_key)
    out, err = (logs.get_log_data_for_type(key, io, 0, None)[0].decode()
                for io in (ComputeIOType.STDOUT, ComputeIOType.STDERR))
    for where, text in (("the compute log", out), ("the terminal", shown.stdout)):
        assert "said in the step" in text and "said by a child" in text, where
    for where, text in (("the compute log", err), ("the terminal", shown.stderr)):
        assert "warned in the step" in text and "warned by a child" in text, where
    assert logs.is_capture_complete(key)


def test_reading_many_runs_keeps_only_a_few_connections_open(instance):
    """The webserver reads the logs of every run a person opens: the least recently used are closed."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME

    from rmi_pipeline.automation.home_storage import KEPT_OPEN

    job = _job()
    run_ids = [job.execute_in_process(instance=instance, run_config=QUIET).run_id for _ in range(KEPT_OPEN + 4)]
    for run_id in run_ids:
        assert instance.all_logs(run_id)
    folder = Path(instance.event_log_storage.path_for_shard(INDEX_SHARD_NAME)).parent
    open_logs = {target for fd in os.listdir("/proc/self/fd")
                 if (target := _target(fd)).endswith(".db") and Path(target).parent == folder}
    assert 0 < len(open_logs) <= KEPT_OPEN


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def test_the_home_storage_refuses_a_dagster_it_was_not_written_against():
    """It subclasses Dagster's private sqlite storage: another minor version fails at start-up, naming the range
    that pyproject.toml pins."""
    import tomllib

    from rmi_pipeline.automation.home_storage import SUPPORTED_DAGSTER, check_dagster_version

    for version in ("1.13.27", "1.13.40"):
        check_dagster_version(version)
    for version in ("1.14.0", "1.12.9", "1.13.26", "2.0.0"):
        with pytest.raises(RuntimeError, match=f"supports dagster{SUPPORTED_DAGSTER}"):
            check_dagster_version(version)
    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert f"dagster{SUPPORTED_DAGSTER}" in pyproject["project"]["dependencies"]
