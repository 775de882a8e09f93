"""Kill -9 at spread-out moments of each stage, then the documented recovery: what was lost, doubled or left stuck.

    python bench/kills.py [--trials 20] [--stages ingest,training,promotion]

Each trial SIGKILLs the process group of a stage after a delay spread evenly over that stage's measured duration:
ingest   `rmi feedback ingest` of a fresh batch; recovery: the same command again
training `rmi run --cycles 0` (a first model trained through Pipes); recovery: `rmi run --cycles 0` again
promotion  a promotion of the challenger in a process of its own; recovery: the promotion again
and then counts events lost and doubled, Dagster runs left unfinished, MLflow runs left RUNNING, whether the
champion ends its history and whether `rmi rollback` would work. Nothing here is asserted: it prints the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# a first model in seconds; the floor at 0 so that it always serves (the bench asks whether the loop goes on)
SMALL = {"RMI_TRAIN_BOOTSTRAP_STEPS": "300", "RMI_EVAL_ITEMS_PER_SLICE": "20",
         "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE": "20",
         "RMI_GATE_RESAMPLES": "200", "RMI_GATE_FIRST_FLOOR": "0", "MLFLOW_DISABLE_TELEMETRY": "true",
         "OMP_WAIT_POLICY": "PASSIVE"}
RMI = [sys.executable, "-m", "rmi_pipeline.cli.main"]
PROMOTE = """
import sys, time
from rmi_pipeline.resources import build_resources
from rmi_pipeline.settings import Settings
registry = build_resources(Settings())["registry"]
print("ready", flush=True)
registry.promote(sys.argv[1], {"promoted_by": "bench"})
"""


def run(argv, env, kill_after: float | None = None, ready: bool = False) -> tuple[int, float]:
    """(exit code, seconds); with `kill_after`, the process group is SIGKILLed that long after it started (or
    after it printed 'ready')."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    if ready:
        proc.stdout.readline()
        started = time.perf_counter()
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    return proc.returncode, time.perf_counter() - started


def state(env) -> dict:
    """Events per event_id, unfinished Dagster runs, RUNNING MLflow runs, champion and history."""
    code = """
import json
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from rmi_pipeline.cli.home import prepare_home
from rmi_pipeline.resources import build_resources
from rmi_pipeline.resources.registry import CHAMPION
from rmi_pipeline.settings import Settings
settings = Settings(); prepare_home(settings); res = build_resources(settings)
events = res["warehouse"].query("SELECT count(*) AS n, count(DISTINCT event_id) AS d FROM feedback_events")
instance = DagsterInstance.get()
unfinished = instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING,
                                                    DagsterRunStatus.QUEUED]))
failed = instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.FAILURE]))
registry = res["registry"]; client = registry.client(); exp = client.get_experiment_by_name(registry.experiment)
running = len(client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")) if exp else 0
champion = registry.version(CHAMPION)
history = registry.champion_history() if champion else []
print(json.dumps({"events": int(events["n"][0]), "distinct": int(events["d"][0]), "unfinished": len(unfinished),
                  "runs_failed": len(failed),
                  "mlflow_running": running, "champion": str(champion.version) if champion else None,
                  "history": history}))
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def batch(path: Path, trial: int, n: int) -> Path:
    lines = [json.dumps({"event_id": f"t{trial}-{i}", "ts": "2026-12-01T10:00:00Z", "user_id": "u",
                         "model_version": "1", "prompt": f"{i}+{trial}=", "completion": str(i + trial),
                         "rating": "up"}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def ingest(env, home: Path, trials: int, n: int) -> dict:
    _, seconds = run([*RMI, "feedback", "ingest", str(batch(home / "t-1.jsonl", -1, n))], env)
    out = {"seconds_unkilled": round(seconds, 1), "trials": 0, "killed": 0, "lost": 0, "doubled": 0, "unfinished": 0,
           "recovery_failed": 0}
    expected = n
    for t in range(trials):
        path = batch(home / f"t{t}.jsonl", t, n)
        code, _ = run([*RMI, "feedback", "ingest", str(path)], env, kill_after=seconds * (t + 0.5) / trials)
        out["killed"] += code == -signal.SIGKILL
        code, _ = run([*RMI, "feedback", "ingest", str(path)], env)
        out["recovery_failed"] += code not in (0, 2)  # 2: it had landed before the kill ("already landed")
        expected += n
        s = state(env)
        out["trials"] += 1
        out["lost"] = expected - s["distinct"]
        out["doubled"] = s["events"] - s["distinct"]
        out["unfinished"] = max(out["unfinished"], s["unfinished"])
        out["runs_killed_and_marked_failed"] = s["runs_failed"]
    return out


def training(env, trials: int) -> dict:
    _, seconds = run([*RMI, "run", "--cycles", "0", "--fresh"], env)
    out = {"seconds_unkilled": round(seconds, 1), "trials": 0, "killed": 0, "unfinished": 0, "mlflow_running": 0,
           "no_champion_after_recovery": 0}
    for t in range(trials):
        code, _ = run([*RMI, "run", "--cycles", "0", "--fresh"], env, kill_after=seconds * (t + 0.5) / trials)
        out["killed"] += code == -signal.SIGKILL
        run([*RMI, "run", "--cycles", "0"], env)
        s = state(env)
        out["trials"] += 1
        out["unfinished"] += s["unfinished"]
        out["mlflow_running"] += s["mlflow_running"]
        out["no_champion_after_recovery"] += s["champion"] is None
        out["runs_killed_and_marked_failed"] = out.get("runs_killed_and_marked_failed", 0) + s["runs_failed"]
    return out


def promotion(env, trials: int) -> dict:
    """On the home `training` left, with a second model version: the champion moved between the two, killed at
    spread-out moments of each promotion."""
    for _ in range(2):  # a first model and another candidate: versions 1 and 2 at least
        run([*RMI, "run", "--cycles", "0"], env)
    out = {"trials": 0, "killed": 0, "history_broken": 0, "rollback_impossible": 0}
    seconds = None
    for t in range(trials):
        target = "2" if state(env)["champion"] == "1" else "1"
        if seconds is None:
            _, seconds = run([sys.executable, "-c", PROMOTE, target], env, ready=True)
            target = "2" if target == "1" else "1"
        code, _ = run([sys.executable, "-c", PROMOTE, target], env, kill_after=seconds * (t + 0.5) / trials,
                      ready=True)
        out["killed"] += code == -signal.SIGKILL
        run([sys.executable, "-c", PROMOTE, target], env, ready=True)  # recovery: promote again
        s = state(env)
        out["trials"] += 1
        out["history_broken"] += s["history"][-1:] != [s["champion"]] or s["champion"] != target
        out["rollback_impossible"] += len(s["history"]) < 2
    out["seconds_unkilled"] = round(seconds or 0, 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--stages", default="ingest,training,promotion")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="rmi-kills-"))
    env = {**os.environ, **SMALL, "RMI_HOME": str(home / "home"), "RMI_FEEDBACK_INGEST_BACKOFF_SECONDS": "0"}
    stages = args.stages.split(",")
    for stage in stages:
        started = time.perf_counter()
        if stage == "ingest":
            result = ingest(env, home, args.trials, args.events)
        elif stage == "training":
            result = training(env, args.trials)
        else:
            result = promotion(env, args.trials)
        print(json.dumps({"stage": stage, **result, "bench_seconds": round(time.perf_counter() - started)}),
              flush=True)


if __name__ == "__main__":
    main()
