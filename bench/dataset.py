"""The training dataset stage as the feedback history grows: seconds and peak memory, batch forms against row by row.

    python bench/dataset.py                          histories of 100k, 1M and 10M events
    python bench/dataset.py --largest 1000000        a quicker run

For each history size a warehouse is grown with valid synthetic events (bench/ingest.py's generator: arithmetic
feedback of tiers 1-8; not timed), an eval manifest is sealed from the recipe's eval suite, and the real
`training_dataset` asset is materialized, each route in a fresh process whose peak resident memory is printed:
  batch      the default recipe as it is: validity, canonical hash and slice as polars expressions
  row        the same recipe with only its per-row functions (what a recipe that offers no batch forms gets:
             the contract's defaults call them row by row), at the smaller sizes only
Seconds: materialize() end to end (Dagster's run start included); step s: the step alone. The ratio is each
route's seconds against the batch route's at the same size. Peak MB: the whole process (VmHWM), of it before:
what it held before the stage began (imports, MLflow).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe  # noqa: E402
from rmi_pipeline.recipes.base import Recipe  # noqa: E402

SIZES = (100_000, 1_000_000, 10_000_000)
ROW_BY_ROW_UP_TO = 1_000_000  # the per-row route takes minutes past this


class RowByRow(ArithmeticRecipe):
    """The default recipe without its batch forms: the contract's defaults call the per-row functions."""

    parse_prompts, valid_completions = Recipe.parse_prompts, Recipe.valid_completions


def grow(home: Path, n: int) -> None:
    """A home whose warehouse holds n valid events and whose eval manifest is sealed (the eval suite's hashes)."""
    import random

    import polars as pl
    from ingest import synth

    from rmi_pipeline.resources import build_resources, layout
    from rmi_pipeline.schema import EVENT_COLUMNS
    from rmi_pipeline.settings import Settings

    os.environ["RMI_HOME"] = str(home)
    resources = build_resources(Settings())
    for start in range(0, n, 1_000_000):
        frame = synth(min(1_000_000, n - start), seed=start // 1_000_000 + 1, start=start, bad=0, repeated=0)
        resources["warehouse"].ingest(frame.with_columns(
            ts=pl.col("ts").str.to_datetime(time_zone="UTC"), meta=pl.col("meta").struct.json_encode(),
            batch_id=pl.format("b{}", pl.lit(start // 1_000_000)), tier=pl.lit(None, dtype=pl.Int64))
            .select(list(EVENT_COLUMNS)))
    recipe = ArithmeticRecipe()
    suite = recipe.build_eval_suite(random.Random(0), 100)
    resources["storage"].write_json(layout.EVAL_MANIFEST, {
        "version": "bench", "leak_marker": "rmi-leak-marker-bench", "mined_share": 0.5, "ngram_n": 13,
        "ngram_hashes": [], "hashes": sorted({recipe.prompt_hash(t.prompt) for t in suite})})


def one(home: Path, recipe: str) -> dict:
    """The child process: the training_dataset asset on `home`, timed, with this process's peak memory."""
    os.environ.update({"RMI_HOME": str(home), "RMI_RECIPE": recipe, "MLFLOW_DISABLE_TELEMETRY": "true",
                       "RMI_MIX": json.dumps({"feedback": 0.5, "corrections": 0.3, "replay": 0.2})})
    from dagster import DagsterInstance, materialize

    from rmi_pipeline.assets.dataset import training_dataset
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.settings import Settings

    resources = build_resources(Settings())
    resources["registry"].version("champion")  # MLflow's first connection, not the stage's
    before = _peak_mb()
    start = time.perf_counter()
    instance = DagsterInstance.ephemeral()
    result = materialize([training_dataset], instance=instance, resources=resources, raise_on_error=True)
    seconds = time.perf_counter() - start
    step = instance.get_run_step_stats(result.run_id)[0]
    meta = {k: v.value for k, v in result.asset_materializations_for_node("training_dataset")[0].metadata.items()}
    return {"seconds": seconds, "step_seconds": step.end_time - step.start_time, "rows": meta["rows"],
            "peak_mb": _peak_mb(), "before_mb": before}


def _peak_mb() -> float:
    """This process's peak resident memory since it started (VmHWM; getrusage's ru_maxrss keeps the parent's
    across exec, and the parent grew the warehouse)."""
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--largest", type=int, default=SIZES[-1])
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # HOME RECIPE: the child process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.one[0]), args.one[1])))
        return
    print(f"{'events':>11} {'route':>6} {'rows':>11} {'seconds':>8} {'step s':>7} {'x batch':>8} {'peak MB':>8} "
          f"{'of it before':>12}", flush=True)
    routes = {"batch": "rmi_pipeline.recipes.arithmetic:ArithmeticRecipe", "row": "dataset:RowByRow"}
    for n in [s for s in SIZES if s <= args.largest]:
        home = Path(tempfile.mkdtemp(prefix=f"rmi-bench-dataset-{n}-"))
        try:
            grow(home, n)
            first = None
            for route, recipe in routes.items():
                if route == "row" and n > ROW_BY_ROW_UP_TO:
                    continue
                out = subprocess.run([sys.executable, __file__, "--one", str(home), recipe], capture_output=True,
                                     text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)})
                if out.returncode != 0:
                    print(f"{n:>11,} {route:>6} failed:\n{out.stderr[-3000:]}", flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                first = first or r["seconds"]
                print(f"{n:>11,} {route:>6} {r['rows']:>11,} {r['seconds']:8.1f} {r['step_seconds']:7.1f} "
                      f"{r['seconds'] / first:8.2f} "
                      f"{r['peak_mb']:8.0f} {r['before_mb']:12.0f}", flush=True)
        finally:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
