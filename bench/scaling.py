"""How one cycle's cost grows with feedback volume, and how training speed falls with model size.

    python bench/scaling.py                          feedback 10k, 100k, 1M, 10M events; every model size
    python bench/scaling.py --largest 1000000        a quicker run
    python bench/scaling.py --volumes 10000000 100000000 --no-sizes      a 100M-event history (about 25 minutes)

Part 1 runs each volume N in its own process and RMI_HOME (so the peak memory printed is that volume's): a first
model (a few steps, not timed), then N synthetic events (bench/ingest.py's generator: arithmetic feedback of
tiers 1-8, 0.2% bad rows, 0.1% repeated ids) land as Parquet batches of at most 1M events and go through the real
jobs: one ingest_feedback run per batch, then improvement_cycle. Seconds per stage (ingest; the cycle's steps: the
eval suite and the champion's practice, which do not depend on N; the dataset; training at a fixed
RMI_TRAIN_STEPS, which still encodes every row; evaluation and gate; the other steps: the reward model, the
judge's agreement, the challengers' selection), their ratio against the smallest N, and
the peak resident memory of the process and, together, of its children (the training program).

Part 2 trains each of the recipe's model sizes on the same rows for a few steps on this machine and prints
parameters, steps/s and tokens/s, and the ratio against the smallest.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as its logged runs were measured (and the tests run)

VOLUMES = (10_000, 100_000, 1_000_000, 10_000_000)  # and 100M on request (--volumes)
BATCH = 1_000_000
STAGES = ("ingest", "suite", "practice", "dataset", "training", "evaluation", "gate", "other")
STEPS = {"suite": "eval_suite", "practice": "practice", "dataset": "training_dataset", "training": "candidate_model",
         "evaluation": "candidate_evaluation", "gate": "champion"}  # the improvement_cycle steps (other: the rest)


class ChildrenPeak(threading.Thread):
    """Peak resident memory of this process's descendants together (the training program runs as one), read from
    /proc: getrusage's figure for children would count the parent's pages that a fork shares."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak_kb, self.done = 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.peak_kb = max(self.peak_kb, sum(_rss_kb(p) for p in _descendants(os.getpid())))


def _descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *_descendants(child)]
    return found


def _rss_kb(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)


def one_volume(n: int, train_steps: int, home: Path) -> dict:
    """The child process: a home with a first model, n events ingested, one improvement cycle timed."""
    os.environ.update({"RMI_HOME": str(home), "RMI_TRAIN_BOOTSTRAP_STEPS": "50", "RMI_GATE_FIRST_FLOOR": "0",
                       "RMI_PROMOTION": "offline",
                       "RMI_TRAIN_STEPS": str(train_steps), "MLFLOW_DISABLE_TELEMETRY": "true"})
    from dagster import DagsterInstance
    from ingest import synth

    from rmi_pipeline.automation.in_process import QUIET_LOGS, ingest_new_batches
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.definitions import build_definitions
    from rmi_pipeline.resources import build_resources, layout
    from rmi_pipeline.settings import Settings
    from rmi_pipeline.world import World

    settings = Settings()
    prepare_home(settings, fresh=True)
    defs, instance = build_definitions(settings), DagsterInstance.get()
    World(settings).ensure_eval_suite()
    cycle = defs.resolve_job_def("improvement_cycle")
    assert cycle.execute_in_process(instance=instance, run_config=QUIET_LOGS).success, "first model"

    storage = build_resources(settings)["storage"]
    for start in range(0, n, BATCH):  # built and landed one batch at a time: memory stays that of one batch
        frame = synth(min(BATCH, n - start), seed=start // BATCH + 1, start=start)
        with tempfile.NamedTemporaryFile(suffix=".parquet") as tmp:
            frame.write_parquet(tmp.name)
            storage.write_bytes(layout.incoming(f"batch-{start // BATCH:03d}.parquet"), Path(tmp.name).read_bytes())
        del frame
    t = time.perf_counter()
    ingest = ingest_new_batches(defs, instance)
    seconds = {"ingest": time.perf_counter() - t}
    assert ingest["failed"] == 0 and ingest["rows_in"] == n, ingest

    t = time.perf_counter()
    children = ChildrenPeak()
    children.start()
    result = cycle.execute_in_process(instance=instance, run_config=QUIET_LOGS, raise_on_error=False)
    seconds["cycle"] = time.perf_counter() - t
    children.done.set()
    assert result.success, "the improvement cycle failed"
    steps = {s.step_key: s.end_time - s.start_time for s in instance.get_run_step_stats(result.run_id)}
    meta = {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}
    # a graph asset's steps are keyed "candidate_model.<op>[<candidate>]": a stage is all of its steps
    seconds |= {stage: sum(t for key, t in steps.items() if key.split(".")[0] == step) for stage, step in STEPS.items()}
    seconds["other"] = sum(t for key, t in steps.items() if key.split(".")[0] not in STEPS.values())
    return {"n": n, "ingested": ingest["ingested"], "dataset_rows": meta["training_dataset"]["rows"],
            "seconds": seconds, "train_seconds": meta["candidate_model"].get("train_seconds"),
            "rss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_children_mb": children.peak_kb / 1024}


def part1(volumes: list[int], train_steps: int) -> list[dict]:
    print(f"one cycle by feedback volume (training fixed at {train_steps} steps); seconds, x = against "
          f"{volumes[0]:,}", flush=True)
    header = "  ".join(f"{s:>13}" for s in STAGES)
    print(f"{'events':>11}  {'rows':>10}  {header}  {'cycle':>7}  {'MB peak (self, children)':>15}", flush=True)
    results = []
    for n in volumes:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--train-steps", str(train_steps)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{n:>11,}  failed:\n{out.stderr[-3000:]}", flush=True)
            break
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        base, row = results[0]["seconds"], results[-1]
        cells = "  ".join(f"{row['seconds'][s]:7.1f} {row['seconds'][s] / max(base[s], 1e-9):5.1f}x" for s in STAGES)
        print(f"{n:>11,}  {row['dataset_rows']:>10,}  {cells}  {row['seconds']['cycle']:7.1f}  "
              f"{row['rss_self_mb']:7.0f} {row['rss_children_mb']:7.0f}", flush=True)
    return results


def part2(rows: int, steps: dict[str, int]) -> None:
    import torch
    from ingest import synth

    from rmi_pipeline.ml.train import fit
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe

    recipe = ArithmeticRecipe()
    frame = synth(rows, seed=7, bad=0, repeated=0)
    tokens, mask = recipe.encode(None, frame["prompt"].to_list(), frame["completion"].to_list())
    print(f"\ntraining speed by model size ({rows:,} rows, batch 64, {torch.get_num_threads()} threads, "
          f"this machine's CPU)\n{'size':>6} {'parameters':>11} {'steps':>6} {'steps/s':>8} {'tokens/s':>9} "
          f"{'x':>7}")
    first = None
    for size in recipe.sizes:
        module = recipe.build_model(learning_rate=3e-3, max_steps=steps.get(size, 5), size=size)
        params = sum(p.numel() for p in module.parameters())
        fit(module, tokens, mask, max_steps=2, max_seconds=600, trainer={"accelerator": "cpu"})  # warm-up
        result = fit(module, tokens, mask, max_steps=steps.get(size, 5), max_seconds=600,
                     trainer={"accelerator": "cpu"})
        rate = result.steps / result.seconds
        first = first or rate
        print(f"{size:>6} {params:>11,} {result.steps:>6} {rate:8.2f} {rate * 64 * tokens.shape[1]:9,.0f} "
              f"{rate / first:7.4f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--largest", type=int, default=VOLUMES[-1], help="largest feedback volume (0: skip part 1)")
    parser.add_argument("--volumes", type=int, nargs="+", help="these feedback volumes instead (the first is the "
                                                                 "baseline of the ratios)")
    parser.add_argument("--train-steps", type=int, default=100, help="training steps of the timed cycle")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process of part 1
    parser.add_argument("--no-sizes", action="store_true", help="skip part 2")
    args = parser.parse_args()
    if args.one:
        home = Path(tempfile.mkdtemp(prefix=f"rmi-scaling-{args.one}-"))
        try:
            print(json.dumps(one_volume(args.one, args.train_steps, home)))
        except BaseException:
            print(f"the failed run's home is kept for a look: {home} (rmi status, rmi ui with RMI_HOME)",
                  file=sys.stderr)
            raise
        shutil.rmtree(home, ignore_errors=True)  # up to a GB of store and warehouse per volume
        return
    if args.volumes or args.largest:
        part1(args.volumes or [n for n in VOLUMES if n <= args.largest], args.train_steps)
    if not args.no_sizes:
        part2(2000, {"tiny": 100, "gpu": 3})


if __name__ == "__main__":
    main()
