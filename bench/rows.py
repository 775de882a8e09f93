"""Memory and time of the training program's rows: ragged on disk (ml/rows.py) against padded in memory (the
program before), on the same synthetic dataset, each way in its own process.

    python bench/rows.py [--rows 1000000] [--steps 100]
    python bench/rows.py --rows 77000000 --only new      the rows of a 100M-event history (bench/scaling.py), the
                                                         new way alone: the way before takes about 1.1 KB a row

The dataset is like that of bench/scaling.py's cycle: row groups of 250k rows, sums and differences of tiers 1-8
(at most 27 tokens), 0.1% of them practice sums of tier 60 (183 tokens) and 0.1% wrong RL answers with the right one
as their reference. Each way reads it as the training program does (the new way is the program itself, without a
warm start; the way before trains with today's fit, on its padded rows) and trains `--steps` steps. Printed: seconds
reading and training, the peak resident memory (VmHWM) and the peaks of its anonymous and file-backed parts (RssAnon,
RssFile: pages of the mapped rows, clean, which the kernel takes back under pressure), the ratios before / now; both
ways must train the same candidate.
"""

import argparse
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GROUP = 250_000  # rows a row group: the dataset asset writes a warehouse chunk at a time
LONG, WRONG = 0.001, 0.001  # shares of practice sums of LONG_TIER digits and of wrong RL answers
LONG_TIER = 60
SHARES = {"feedback": 0.4, "replay": 0.4, "practice": 0.1, "rl": 0.1}


def write_dataset(path: Path, n: int, seed: int = 0) -> dict[str, float]:
    """`n` rows in the training dataset's columns, written a row group at a time; returns the mix's weights."""
    import numpy as np
    import polars as pl
    import pyarrow.parquet as pq

    from rmi_pipeline.ml.mix import weights
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe

    recipe, rng, rand, sizes, writer = ArithmeticRecipe(), np.random.default_rng(seed), random.Random(seed), {}, None
    for start in range(0, n, GROUP):
        k = min(GROUP, n - start)
        tier = rng.integers(1, 9, k)
        low = np.where(tier == 1, 0, 10 ** (tier - 1))
        a, b = rng.integers(low, 10**tier), rng.integers(low, 10**tier)
        sub = rng.random(k) < 0.5
        a, b = np.where(sub, np.maximum(a, b), a), np.where(sub, np.minimum(a, b), b)
        truth = np.where(sub, a - b, a + b)
        kind = rng.random(k)
        wrong, long = kind < WRONG, (kind >= WRONG) & (kind < WRONG + LONG)
        mix = np.where(wrong, "rl", np.where(long, "practice", np.where(kind < 0.7, "feedback", "replay")))
        frame = pl.DataFrame({
            "prompt": pl.Series(a).cast(pl.String) + pl.Series(np.where(sub, "-", "+")) + pl.Series(b).cast(pl.String)
            + "=",
            "target": pl.Series(np.where(wrong, truth + rng.integers(1, 10, k), truth)).cast(pl.String),
            "mix": mix, "scale": np.where(wrong, -1.0, 1.0),
            "reference": pl.select(pl.when(pl.Series(wrong)).then(pl.Series(truth).cast(pl.String))).to_series(),
            "teacher": pl.Series([None] * k, dtype=pl.String), "rejected": pl.Series([None] * k, dtype=pl.String),
            "skill": np.where(sub, "sub", "add"), "tier": tier})
        at = np.flatnonzero(long)
        tasks = recipe.sample_tasks(rand, len(at), ["add"], [LONG_TIER])
        frame = frame.with_columns(frame["prompt"].scatter(at, [t.prompt for t in tasks]),
                                   frame["target"].scatter(at, [t.answer for t in tasks]),
                                   frame["tier"].scatter(at, LONG_TIER), frame["skill"].scatter(at, "add"))
        for m, count in frame["mix"].value_counts().iter_rows():
            sizes[m] = sizes.get(m, 0) + count
        table = frame.to_arrow()
        writer = writer or pq.ParquetWriter(path, table.schema, compression="zstd")
        writer.write_table(table)
    writer.close()
    return weights(sizes, SHARES)


def padded(recipe, module, path: Path, mix: dict[str, float]):
    """The program before, as it read the rows: every row group encoded, then all padded to the widest and
    concatenated, the frame keeping every row's strings (a polars null keeps the buffer it nulls); the wrong RL
    answers cut at their first mistake. Returns fit's arguments."""
    import polars as pl
    import pyarrow.parquet as pq
    import torch

    from rmi_pipeline.ml.rl import first_mistake

    frames, tokens, masks = [], [], []
    dataset = pq.ParquetFile(path)
    for group in range(dataset.num_row_groups):
        part = pl.from_arrow(dataset.read_row_group(group))
        ids, mask = recipe.encode(module, part["prompt"], part["target"])
        tokens.append(ids)
        masks.append(mask)
        frames.append(part.with_columns(prompt=pl.when(pl.col("reference").is_not_null()).then("prompt"),
                                        target=pl.when(pl.col("teacher").is_not_null()).then("target")))
    width = max(t.shape[1] for t in tokens)
    tokens, mask = (torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in parts])
                    for parts in (tokens, masks))
    data = pl.concat(frames)
    weights = torch.tensor(data["mix"].replace_strict(mix, return_dtype=pl.Float64).to_numpy())
    names = data["mix"].unique(maintain_order=True).to_list()
    sources = torch.tensor(data["mix"].replace_strict({n: i for i, n in enumerate(names)}).to_numpy())
    scales = torch.tensor(data["scale"].to_numpy())
    wrong = data.with_row_index().filter(pl.col("reference").is_not_null())
    reference, _ = recipe.encode(module, wrong["prompt"], wrong["reference"])
    at = torch.tensor(wrong["index"].to_numpy(), dtype=torch.long)
    cut = first_mistake(tokens[at], mask[at], reference)
    scales[at] *= cut.sum(1) / mask[at].sum(1).clamp(min=1)
    mask[at] = cut
    return tokens, mask, weights, {"scales": scales, "sources": sources}


class Peaks(threading.Thread):
    """The highest RssAnon and RssFile of this process, read from /proc every 20 ms."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = {"RssAnon": 0.0, "RssFile": 0.0}

    def run(self) -> None:
        while True:
            for field, mb in status_mb().items():
                if field in self.peak:
                    self.peak[field] = max(self.peak[field], mb)
            time.sleep(0.02)


def status_mb() -> dict[str, float]:
    return {line.split(":")[0]: int(line.split()[1]) / 1024 for line in Path("/proc/self/status").read_text()
            .splitlines() if line.split(":")[0] in ("VmHWM", "RssAnon", "RssFile")}


def one(way: str, folder: Path, steps: int) -> dict:
    """The child process: one way of reading the dataset and training on it."""
    import torch

    from rmi_pipeline.ml.train import fit
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
    from rmi_pipeline.settings import Training
    from rmi_pipeline.training.program import train

    mix = json.loads((folder / "mix.json").read_text())
    extras = {"recipe": "rmi_pipeline.recipes.arithmetic:ArithmeticRecipe", "dataset_uri": str(folder / "rows.pq"),
              "storage_options": {}, "warm_start_uri": None, "checkpoint_uri": str(folder / f"{way}.ckpt"),
              "mix_weights": mix, "model_size": "tiny", "steps": steps, "max_seconds": 3600, "seed": 0,
              "batch_size": 64, "learning_rate": 3e-3, "trainer": {**Training().hardware(), "accelerator": "cpu"}}
    peaks = Peaks()
    peaks.start()
    started = time.perf_counter()
    if way == "new":
        trained = train(extras)["train_seconds"]
    else:
        recipe = ArithmeticRecipe()
        torch.manual_seed(0)
        module = recipe.build_model(extras["learning_rate"], steps, size="tiny")
        tokens, mask, weights, columns = padded(recipe, module, folder / "rows.pq", mix)
        trained = fit(module, tokens, mask, weights, max_steps=steps, max_seconds=3600, batch_size=64, seed=0,
                      trainer=Training(**extras["trainer"]).trainer_options(), **columns).seconds
        (folder / f"{way}.ckpt").write_bytes(recipe.checkpoint(module))
    seconds = time.perf_counter() - started
    return {"read": seconds - trained, "train": trained, **status_mb(),
            **{f"peak{k}": v for k, v in peaks.peak.items()},
            "candidate": hashlib.sha256((folder / f"{way}.ckpt").read_bytes()).hexdigest()[:12]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--only", choices=["old", "new"], help="one way only")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: old or new
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, Path(args.folder), args.steps)))
        return
    with tempfile.TemporaryDirectory(prefix="rmi-bench-rows-") as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        (folder / "mix.json").write_text(json.dumps(write_dataset(folder / "rows.pq", args.rows)))
        print(f"{args.rows:,} rows written in {time.perf_counter() - started:.0f} s; {args.steps} steps", flush=True)
        results = {}
        for way in [args.only] if args.only else ["old", "new"]:
            out = subprocess.run([sys.executable, __file__, "--one", way, "--folder", tmp, "--steps", str(args.steps)],
                                 check=True, capture_output=True, text=True).stdout
            results[way] = r = json.loads(out.strip().splitlines()[-1])
            print(f"{way:>4}: read {r['read']:6.1f} s, train {r['train']:6.1f} s; peak {r['VmHWM']:7.0f} MB "
                  f"(RssAnon {r['peakRssAnon']:7.0f} MB, RssFile {r['peakRssFile']:6.0f} MB)", flush=True)
    if len(results) == 2:
        old, new = results["old"], results["new"]
        print(f"before / now: read {old['read'] / new['read']:.2f}x, train {old['train'] / new['train']:.2f}x, "
              f"peak {old['VmHWM'] / new['VmHWM']:.2f}x, RssAnon {old['peakRssAnon'] / new['peakRssAnon']:.2f}x; "
              f"the same candidate: {old['candidate'] == new['candidate']}")


if __name__ == "__main__":
    main()
