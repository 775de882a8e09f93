"""Steps per second of training on rows of mixed lengths, batches drawn by length (ml/train.py) against not.

    python bench/buckets.py [--steps 200] [--rounds 3]

A grown curriculum mixes short rows (users' questions, 3-6 digits) with long ones (practice at the frontier, 50-55
digits: 10% of the rows here). Each batch is cut to its longest row, so without sorting a pool of batches by row
length nearly every batch carries a long row and is computed at its length. Both ways train the same model on the
same rows for the same steps (one thread, alternating order); printed: steps/s and the ratio.
"""

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rmi_pipeline.ml import train  # noqa: E402
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    recipe = ArithmeticRecipe()
    tasks = (recipe.sample_tasks(random.Random(0), 9000, list(recipe.skills), [3, 4, 5, 6])
             + recipe.sample_tasks(random.Random(1), 1000, list(recipe.skills), [50, 55]))
    tokens, mask = recipe.encode(None, [t.prompt for t in tasks], [t.answer for t in tasks])
    by_length = train.POOL
    rates: dict[int, list[float]] = {1: [], by_length: []}
    for round_ in range(args.rounds):
        for pool in (1, by_length) if round_ % 2 == 0 else (by_length, 1):
            train.POOL = pool  # a pool of one batch: each batch as drawn
            torch.manual_seed(0)
            module = recipe.build_model(3e-3, args.steps)
            started = time.perf_counter()
            train.fit(module, tokens, mask, max_steps=args.steps, max_seconds=3600, batch_size=64)
            rates[pool].append(args.steps / (time.perf_counter() - started))
            print(f"round {round_ + 1}: pool {pool}: {rates[pool][-1]:.1f} steps/s", flush=True)
    plain, sorted_ = (statistics.median(rates[p]) for p in rates)
    print(f"\nmedian of {args.rounds}: {sorted_:.1f} steps/s drawn by length against {plain:.1f} as drawn "
          f"({sorted_ / plain:.1f}x), {len(tokens):,} rows of {mask.shape[1]} tokens at most, 1 thread")


if __name__ == "__main__":
    main()
