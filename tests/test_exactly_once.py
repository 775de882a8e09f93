"""Every feedback event lands exactly once, whatever dies: a kill during an ingest (through the CLI and through a
sensor tick), several writers at once, a run whose process is gone, a link among the batch files."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from dagster import (
    AssetMaterialization,
    DagsterRun,
    DagsterRunStatus,
    RunRequest,
    build_sensor_context,
    instance_for_test,
)
from feedback_intake import event

from rmi_pipeline.automation.dead_runs import HOST, PID, fail_dead_runs
from rmi_pipeline.automation.sensors import enough_feedback_sensor
from rmi_pipeline.cli.main import main
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.settings import Automation, Settings

# `rmi feedback ingest PATH` (or one in-process sensor tick) in a process that SIGKILLs itself in the warehouse's
# ingest: just before the events are written, or just after they were committed (before Dagster records it)
KILLED = """
import os, signal, sys
from rmi_pipeline.resources.warehouse import Warehouse

where, how = sys.argv[1], sys.argv[2]
original = Warehouse.ingest
def ingest(self, events, *args, **kwargs):
    if where == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    original(self, events, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
Warehouse.ingest = ingest
if how == "cli":
    from rmi_pipeline.cli.main import main
    main(["feedback", "ingest", sys.argv[3]])
else:
    from dagster import DagsterInstance
    from rmi_pipeline.automation.in_process import ingest_new_batches
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.definitions import build_definitions
    from rmi_pipeline.settings import Settings
    settings = Settings()
    prepare_home(settings)
    ingest_new_batches(build_definitions(settings), DagsterInstance.get())
"""


def killed(*argv) -> int:
    return subprocess.run([sys.executable, "-c", KILLED, *argv], capture_output=True, timeout=300).returncode


def training_program(session: int, home: Path) -> psutil.Process | None:
    """The training program started from the process session `session`: the warm worker's child that serves it
    (the worker of `home` forks it; it writes to the client's streams, not the worker's as a spare child waiting for
    the next client does), or a program started cold in the session."""
    for pid_file in (home / "training_worker").glob("*.pid"):
        try:
            worker = json.loads(pid_file.read_text())["pid"]
            children = [c for c in psutil.Process(worker).children()
                        if os.readlink(f"/proc/{c.pid}/fd/2") != os.readlink(f"/proc/{worker}/fd/2")]
        except (OSError, ValueError, psutil.Error):
            continue
        if children:
            return children[0]
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if os.getsid(proc.pid) == session and "rmi_pipeline.training.program" in (proc.info["cmdline"] or []):
                return proc
        except OSError:
            continue
    return None


def events_in(rmi_env) -> list[str]:
    frame = build_resources(rmi_env)["warehouse"].query("SELECT event_id FROM feedback_events ORDER BY event_id")
    return frame["event_id"].to_list()


@pytest.fixture
def batch(rmi_env, tmp_path, monkeypatch):
    monkeypatch.setenv("RMI_FEEDBACK_INGEST_BACKOFF_SECONDS", "0")
    path = tmp_path / "day1.jsonl"
    path.write_text("\n".join(event(i) for i in range(50)) + "\n")
    return path


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_ingest_killed_through_the_cli_lands_exactly_once_when_run_again(rmi_env, batch, capsys, where):
    assert killed(where, "cli", str(batch)) == -signal.SIGKILL
    assert events_in(rmi_env) == ([] if where == "before" else sorted(f"ev-{i}" for i in range(50)))
    assert main(["feedback", "ingest", str(batch)]) == 0  # not refused as "already landed": it had not
    out = capsys.readouterr().out
    assert "did not land before (1 attempt(s)); ingesting it again" in out
    assert events_in(rmi_env) == sorted(f"ev-{i}" for i in range(50))  # every event once
    assert main(["feedback", "ingest", str(batch)]) == 2  # now it has
    assert "already landed" in capsys.readouterr().err


def test_an_ingest_killed_in_a_sensor_tick_is_ingested_again_by_the_next_tick(rmi_env, batch, monkeypatch):
    from dagster import DagsterInstance

    from rmi_pipeline.automation.in_process import ingest_new_batches
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.definitions import build_definitions

    storage = build_resources(rmi_env)["storage"]
    storage.write_bytes(layout.incoming(batch.name), batch.read_bytes())
    assert killed("after", "tick") == -signal.SIGKILL
    settings = Settings()  # with the batch fixture's RMI_FEEDBACK_INGEST_BACKOFF_SECONDS
    prepare_home(settings)
    defs, instance = build_definitions(settings), DagsterInstance.get()
    totals = ingest_new_batches(defs, instance)  # the killed run is marked failed, the batch ingested again
    assert totals["batches"] == 1 and totals["ingested"] == 0 and totals["duplicates"] == 50
    assert events_in(rmi_env) == sorted(f"ev-{i}" for i in range(50))
    assert ingest_new_batches(defs, instance)["batches"] == 0  # landed: never again
    assert sorted(r.status.value for r in instance.get_runs()) == ["FAILURE", "SUCCESS"]  # the killed one, failed


def test_four_ingests_at_once_each_land_exactly_once_and_the_same_file_twice_is_refused_not_broken(rmi_env,
                                                                                                   tmp_path):
    paths = []
    for b in range(4):
        path = tmp_path / f"writer{b}.jsonl"
        path.write_text("\n".join(event(1000 * b + i) for i in range(200)) + "\n")
        paths.append(path)
    rmi = [sys.executable, "-m", "rmi_pipeline.cli.main", "feedback", "ingest"]
    procs = [subprocess.Popen([*rmi, str(p)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for p in [*paths, paths[0]]]  # the first file twice
    outs = [p.communicate(timeout=600) for p in procs]
    codes = [p.returncode for p in procs]
    assert codes[1:4] == [0, 0, 0], outs
    assert sorted(codes[::4]) in ([0, 0], [0, 2]), outs  # the same file: landed once, or refused as such
    assert not any("No such file" in err or "Traceback" in err for _, err in outs), outs
    if 2 in codes[::4]:
        assert "already land" in outs[0][1] + outs[4][1]
    assert events_in(rmi_env) == sorted(f"ev-{1000 * b + i}" for b in range(4) for i in range(200))


def test_a_batch_another_process_registered_a_moment_before_is_no_error(rmi_env):
    """Dagster checks for a partition key, then inserts it: the process that loses that race (seen once in the test
    above, as an exit 1 with the store's unique-key error) finds the batch registered and goes on."""
    from dagster import DagsterInstance
    from sqlalchemy.exc import IntegrityError

    from rmi_pipeline.assets.partitions import feedback_batches
    from rmi_pipeline.automation.batches import register_batches
    from rmi_pipeline.cli.home import prepare_home

    prepare_home(rmi_env)
    with DagsterInstance.get() as instance:
        real = instance.add_dynamic_partitions

        def loses_the_race(name, keys):
            real(name, keys)  # the other process's insert, between this one's check and its own insert
            raise IntegrityError("INSERT INTO dynamic_partitions", None, Exception("UNIQUE constraint failed"))

        instance.add_dynamic_partitions = loses_the_race
        register_batches(instance, ["raced.jsonl"])
        assert instance.has_dynamic_partition(feedback_batches.name, "raced.jsonl")
        def fails(name, keys):
            raise IntegrityError("INSERT INTO dynamic_partitions", None, Exception("another constraint"))

        instance.add_dynamic_partitions = fails
        with pytest.raises(IntegrityError):  # a key still missing after the error: a real failure, not the race
            register_batches(instance, ["missing.jsonl"])


def test_a_cycle_whose_process_died_is_marked_failed_and_no_longer_blocks_the_automation(rmi_env):
    resources = build_resources(rmi_env.model_copy(update={"automation": Automation(cycle_min_new_events=5)}))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with instance_for_test() as instance:
        instance.add_run(DagsterRun(job_name="improvement_cycle", run_id="dead-cycle", status=DagsterRunStatus.STARTED,
                                    tags={PID: str(gone.pid), HOST: socket.gethostname()}))
        instance.report_runless_asset_event(AssetMaterialization("feedback_events", metadata={"ingested": 5}))
        tick = lambda: enough_feedback_sensor(build_sensor_context(  # noqa: E731
            instance=instance, resources={"settings": resources["settings"], "registry": resources["registry"]}))
        registry = resources["registry"]
        training = registry.client().create_run(registry._experiment_id(registry.client()),
                                                tags={"dagster_run_id": "dead-cycle"}).info.run_id
        assert "wait for the running cycle" in tick().skip_message
        assert fail_dead_runs(instance, registry) == ["dead-cycle"]
        assert instance.get_run_by_id("dead-cycle").status == DagsterRunStatus.FAILURE
        assert registry.client().get_run(training).info.status == "FAILED"  # the candidate it was training
        assert isinstance(tick(), RunRequest)
        assert fail_dead_runs(instance) == []  # a live run, or one that ended, is left alone


def test_a_link_among_the_batch_files_is_skipped_with_a_reason_and_the_cli_refuses_one(rmi_env, batch, tmp_path,
                                                                                       capsys):
    storage = build_resources(rmi_env)["storage"]
    storage.write_bytes(layout.incoming("real.jsonl"), batch.read_bytes())
    os.symlink(batch, storage.path(layout.incoming("linked.jsonl")))
    files, others = storage.listing(layout.INCOMING)
    assert files == [layout.incoming("real.jsonl")] and others == ["linked.jsonl (a link)"]
    assert main(["status"]) == 0
    assert "skipped, not a plain file: linked.jsonl (a link)" in capsys.readouterr().out
    link = tmp_path / "link.jsonl"
    os.symlink(batch, link)
    assert main(["feedback", "ingest", str(link)]) == 2
    assert "is a symbolic link; pass --follow-symlinks" in capsys.readouterr().err
    assert main(["feedback", "ingest", "--follow-symlinks", str(link)]) == 0


@pytest.mark.parametrize("command", [["feedback", "ingest", "BATCH"], ["run", "--cycles", "1"], ["status"]])
def test_an_unreachable_object_store_is_one_clear_line_and_exit_1(rmi_env, batch, monkeypatch, command):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "RMI_STORAGE_URL": "s3://feedback-bucket/rmi", "RMI_EVAL_URL": "s3://evals-bucket/rmi",
           "RMI_STORAGE_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    argv = [str(batch) if a == "BATCH" else a for a in command]
    out = subprocess.run([sys.executable, "-m", "rmi_pipeline.cli.main", *argv], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot reach s3://" in lines[0] and f"127.0.0.1:{port}" in lines[0], out.stderr
    assert "Traceback" not in out.stdout + out.stderr and "floor" not in out.stdout


def test_a_cycle_killed_while_it_trains_moves_nothing_and_the_next_rmi_run_goes_on(rmi_env, monkeypatch, capsys):
    for key, value in {"RMI_TRAIN_BOOTSTRAP_STEPS": "60", "RMI_EVAL_ITEMS_PER_SLICE": "10", "RMI_GATE_FIRST_FLOOR": "0",
                       "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE": "10", "RMI_GATE_RESAMPLES": "100"}.items():
        monkeypatch.setenv(key, value)
    proc = subprocess.Popen([sys.executable, "-m", "rmi_pipeline.cli.main", "run", "--cycles", "0", "--fresh"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(1200):  # until the training program it launched through Pipes is running
        if proc.poll() is not None or (program := training_program(proc.pid, rmi_env.resolved_home)):
            break
        time.sleep(0.1)
    assert proc.poll() is None, "rmi run ended before it trained"
    time.sleep(1.0)  # into the fit
    os.killpg(proc.pid, signal.SIGKILL)  # rmi run and the Pipes client it started; the program goes with them
    proc.wait()
    assert psutil.wait_procs([program], timeout=30)[0], "the training program outlived the run"
    registry = build_resources(Settings())["registry"]
    training = registry.client().search_runs([registry.client().get_experiment_by_name(registry.experiment)
                                              .experiment_id])
    assert [r.info.status for r in training] == ["RUNNING"] and registry.version("champion") is None

    assert main(["run", "--cycles", "0"]) == 0  # the documented recovery: run again
    assert "was left unfinished by a process that is gone: marked failed" in capsys.readouterr().out
    from dagster import DagsterInstance

    runs = sorted((r.job_name, r.status.value) for r in DagsterInstance.get().get_runs())
    assert runs == [("health_check", "SUCCESS"), ("improvement_cycle", "FAILURE"), ("improvement_cycle", "SUCCESS")]
    assert registry.client().get_run(training[0].info.run_id).info.status == "FAILED"
    assert registry.version("champion") is not None  # the loop went on
