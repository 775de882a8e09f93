"""The warm training worker: imports paid once, every candidate still trained in a process of its own, and the
same candidate as the cold training program would train."""

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import torch
from dagster import AssetKey, instance_for_test
from dagster_pipes import encode_env_var

from rmi_pipeline.cli.home import prepare_home
from rmi_pipeline.definitions import build_definitions
from rmi_pipeline.recipes.base import load_recipe
from rmi_pipeline.settings import Settings
from rmi_pipeline.training.client import COMMAND as CLIENT
from rmi_pipeline.training.protocol import FOLDER, IDLE
from rmi_pipeline.training.worker import stop, worker_folder
from rmi_pipeline.world import World


def the_worker(folder: Path) -> psutil.Process:
    (pid_file,) = folder.glob("*.pid")
    return psutil.Process(json.loads(pid_file.read_text())["pid"])


def programs(worker: psutil.Process, folder: Path) -> list[psutil.Process]:
    """The worker's children that are training programs: not the spare child waiting for the next client."""
    (pid_file,) = folder.glob("*.pid")
    spare = json.loads(pid_file.read_text())["spare"]
    return [child for child in worker.children() if child.pid != spare]


def settled(worker: psutil.Process, folder: Path) -> list[psutil.Process]:
    """The worker's children once it is idle again: the one spare it forks ahead of the next client."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        (pid_file,) = folder.glob("*.pid")
        spare = json.loads(pid_file.read_text())["spare"]
        children = worker.children()
        if spare is not None and [c.pid for c in children] == [spare]:
            return children
        time.sleep(0.05)
    return worker.children()


def blocked_training(tmp_path: Path) -> dict:
    """The environment of a training program under Pipes whose warm start is a named pipe nobody writes: it waits
    there until it is stopped."""
    fifo = tmp_path / "champion.ckpt"
    os.mkfifo(fifo)
    context = tmp_path / "context.json"
    context.write_text(json.dumps({
        "asset_keys": ["candidate_model"], "code_version_by_asset_key": None, "provenance_by_asset_key": None,
        "partition_key": None, "partition_key_range": None, "partition_time_window": None, "run_id": "test",
        "job_name": None, "retry_number": 0,
        "extras": {"recipe": Settings().recipe, "steps": 1, "seed": 0, "warm_start_uri": f"file://{fifo}",
                   "learning_rate": 1e-3}}))
    return {"DAGSTER_PIPES_CONTEXT": encode_env_var({"path": str(context)}),
            "DAGSTER_PIPES_MESSAGES": encode_env_var({"path": str(tmp_path / "messages.jsonl")})}


def test_each_candidate_trains_in_a_child_of_one_warm_worker_that_a_dying_client_takes_along(tmp_path):
    folder = tmp_path / "training_worker"
    env = {**os.environ, FOLDER: str(folder), IDLE: "60"}
    env.pop("DAGSTER_PIPES_CONTEXT", None)

    # outside Pipes the program refuses, and the child's refusal reaches the client's own stderr and exit status
    first = subprocess.run(CLIENT, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 2 and "materialize candidate_model" in first.stderr
    worker = the_worker(folder)
    (pid_file,) = folder.glob("*.pid")  # its socket is in a folder no other user may enter, to listen or connect
    assert os.stat(Path(json.loads(pid_file.read_text())["socket"]).parent).st_mode & 0o077 == 0
    again = subprocess.run(CLIENT, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and the_worker(folder).pid == worker.pid  # the same worker, warm
    (spare,) = settled(worker, folder)  # each program was a child of its own, and is gone; a spare waits

    # a client killed while its program trains takes the program with it; the worker stays
    client = subprocess.Popen(CLIENT, env={**env, **blocked_training(tmp_path)})
    deadline = time.monotonic() + 60
    while not programs(worker, folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    (child,) = worker.children()  # the spare became this client's program; no other is forked while it trains
    assert child.pid == spare.pid != client.pid
    # a client beside it: no spare waits while a program trains, so this one's program is forked when it comes
    beside = subprocess.run(CLIENT, env=env, capture_output=True, text=True, timeout=60)
    assert beside.returncode == 2 and "materialize candidate_model" in beside.stderr
    client.kill()
    client.wait()
    gone, _ = psutil.wait_procs([child], timeout=30)
    assert gone and worker.is_running()
    settled(worker, folder)

    # Ctrl-C (as Dagster sends when a run is terminated) reaches the program, and its status comes back, even sent
    # the moment the program is forked (a signal that reached the child inside fork was lost once: it never ended)
    for attempt in range(3):
        (tmp_path / str(attempt)).mkdir()
        client = subprocess.Popen(CLIENT, env={**env, **blocked_training(tmp_path / str(attempt))},
                                  stderr=subprocess.PIPE, text=True)
        while not programs(worker, folder) and time.monotonic() < deadline + 60 * (attempt + 1):
            time.sleep(0.001)
        client.send_signal(signal.SIGINT)
        _, err = client.communicate(timeout=60)
        assert client.returncode != 0 and "KeyboardInterrupt" in err
        (spare,) = settled(worker, folder)

    assert stop(folder) == 1  # the worker and its spare child both end
    gone, alive = psutil.wait_procs([worker, spare], timeout=30)
    assert alive == [] and list(folder.glob("*.pid")) == []


def takes_sigint(pid: int, thread: int) -> bool:
    """Whether the kernel may give `thread` of `pid` a SIGINT sent to the process (it does not block it)."""
    status = Path(f"/proc/{pid}/task/{thread}/status").read_text()
    blocked = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
    return not blocked & (1 << (signal.SIGINT - 1))


def test_ctrl_c_stops_the_program_while_its_main_thread_waits_in_a_read_and_another_thread_takes_it(tmp_path):
    """The kernel hands a process's SIGINT to any of its threads that does not block it, and Python handles it only
    in the main thread, at its next bytecode: here the main thread waits in the warm start's read and another thread
    takes the signal. The program still stops, as from any Ctrl-C (before, it waited forever)."""
    program = subprocess.Popen([sys.executable, "-m", "rmi_pipeline.training.program"],
                               env={**os.environ, **blocked_training(tmp_path)}, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    try:  # Linux names where a thread sleeps: opening a named pipe no one writes waits "for a partner"
        while Path(f"/proc/{program.pid}/wchan").read_text() != "wait_for_partner":
            assert program.poll() is None and time.monotonic() < deadline, "the program never waited in the read"
            time.sleep(0.05)
        other = next(t.id for t in psutil.Process(program.pid).threads()
                     if t.id != program.pid and takes_sigint(program.pid, t.id))
        assert ctypes.CDLL(None).tgkill(program.pid, other, signal.SIGINT) == 0
        _, err = program.communicate(timeout=30)
    finally:
        program.kill()
    assert program.returncode != 0 and "KeyboardInterrupt" in err


def test_a_run_that_will_train_starts_the_warm_worker_as_it_begins(rmi_env):
    """The launcher resource, set up as such a run begins, starts the worker its training client will reach: the
    imports overlap the cycle's first steps."""
    from dagster import build_resources

    from rmi_pipeline.resources import build_resources as loop_resources

    folder = worker_folder(rmi_env.resolved_home)
    with build_resources({"training_launcher": loop_resources(rmi_env)["training_launcher"]}) as resources:
        launcher = resources.training_launcher
    deadline = time.monotonic() + 120
    while not list(folder.glob("*.pid")) and time.monotonic() < deadline:
        time.sleep(0.1)
    worker = the_worker(folder)  # before any client asked
    client = subprocess.run(CLIENT, env={**os.environ, **launcher.env}, capture_output=True, text=True, timeout=120)
    assert client.returncode == 2 and "materialize candidate_model" in client.stderr  # outside Pipes, it refuses
    assert the_worker(folder).pid == worker.pid  # the run's client was served by that worker, not a new one
    assert stop(folder) == 1
    psutil.wait_procs([worker], timeout=30)


def test_a_warm_candidate_is_the_cold_program_s_candidate_weight_for_weight(rmi_env, monkeypatch):
    """Same dataset, same seed: the candidate of the warm worker and that of the training program started cold
    (`python -m rmi_pipeline.training.program`) have the same weights (so the warm path changes the time, nothing
    else)."""
    monkeypatch.setenv("RMI_TRAIN_BOOTSTRAP_STEPS", "20")
    prepare_home(rmi_env)
    World(rmi_env).ensure_eval_suite()
    up_to_training = [AssetKey(k) for k in ("eval_suite", "practice", "training_dataset", "candidate_model")]
    with instance_for_test() as instance:
        warm = build_definitions(Settings()).resolve_job_def("improvement_cycle")
        assert warm.execute_in_process(instance=instance, asset_selection=up_to_training).success
        # the next candidate from no champion is the turn's second (seed + 1000): the same seed, started cold
        monkeypatch.setenv("RMI_TRAIN_LAUNCHER", "subprocess")
        monkeypatch.setenv("RMI_SEED", str(rmi_env.seed - 1000))
        cold_defs = build_definitions(Settings())
        cold = cold_defs.resolve_job_def("improvement_cycle")
        assert cold.execute_in_process(instance=instance, asset_selection=[AssetKey("candidate_model")]).success
    worker = the_worker(worker_folder(rmi_env.resolved_home))  # the first candidate's
    assert stop(worker_folder(rmi_env.resolved_home)) == 1
    psutil.wait_procs([worker], timeout=30)

    registry = cold_defs.resources["registry"]
    recipe = load_recipe(rmi_env.recipe)
    client = registry.client()
    runs = {v: client.get_run(client.get_model_version(rmi_env.model_name, v).run_id).data for v in ("1", "2")}
    assert runs["1"].params["seed"] == runs["2"].params["seed"]
    assert runs["1"].metrics["steps_done"] == runs["2"].metrics["steps_done"] == 20
    first, second = registry.load("1", recipe).state_dict(), registry.load("2", recipe).state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
