"""Bulk decoding spread over the cores (`ml/cores.py`: a forked process per core, one torch thread each) against
one process on torch's threads (the recipe before), same run, same model; the answers must be identical.

    python bench/cores.py [--rounds 3] [--size tiny]

Workloads: a grown eval (4,000 prompts of 1-34 digits and 120 of 184-192: what a late cycle of `make run` answers
for each model), practice's samples (1,000 of 1-34, 4 each), self-labelling's checks (2,000 of 1-34) and the
coach's second tries (500 of 1-34). Run with OMP_WAIT_POLICY=PASSIVE, as `rmi` and the Makefile run torch.
"""

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rmi_pipeline.ml import cores  # noqa: E402
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe  # noqa: E402


def prompts(recipe, rng, n, low, high):
    return [t.prompt for t in recipe.sample_tasks(rng, n, list(recipe.skills), list(range(low, high + 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="tiny")
    args = parser.parse_args()
    recipe = ArithmeticRecipe()
    torch.manual_seed(0)
    model = recipe.build_model(3e-3, 10, args.size).model.eval()
    with torch.no_grad():  # answers that differ from row to row, as a trained model's
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    rng = random.Random(0)
    grown = prompts(recipe, rng, 4000, 1, 34) + prompts(recipe, rng, 120, 184, 192)
    checks, coached = prompts(recipe, rng, 2000, 1, 34), prompts(recipe, rng, 500, 1, 34)

    def one_process(work):  # the recipe before: every group in this process, on torch's threads
        before = cores.limit_processes(1)
        try:
            return work()
        finally:
            cores.limit_processes(before)

    sampled = prompts(recipe, rng, 1000, 1, 34)
    workloads = {name: (lambda asked=asked: recipe.answer(model, asked), len(asked)) for name, asked in (
        ("grown eval", grown), ("self-label checks", checks), ("coach's second tries", coached))}
    workloads["practice's samples"] = (lambda: recipe.sample(model, sampled, 4, 1.0, 7), 4 * len(sampled))
    print(f"{cores.cores()} cores, torch threads {torch.get_num_threads()}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, {args.size} model")
    for name, (work, answers) in workloads.items():
        work()  # warm-up
        times = {"one process": [], "spread": []}
        for r in range(args.rounds):
            for way in (("one process", "spread") if r % 2 == 0 else ("spread", "one process")):
                started = time.perf_counter()
                out = one_process(work) if way == "one process" else work()
                times[way].append(time.perf_counter() - started)
                if way == "one process":
                    alone = out
                else:
                    spread = out
            assert spread == alone, f"{name}: the answers differ"
        one, many = statistics.median(times["one process"]), statistics.median(times["spread"])
        print(f"{name:22s} {answers:6d} answers: one process {one:6.2f} s, spread {many:6.2f} s: "
              f"{one / many:.2f}x (median of {args.rounds}), identical answers")


if __name__ == "__main__":
    main()
