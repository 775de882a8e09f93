"""Prompts of mixed widths decoded together, left-padded (`recipes/arithmetic/recipe._groups`), against one pass per
operand width (the recipe before), same run, same model; greedy answers must come out identical.

    python bench/widths.py [--size tiny] [--step-cost N]

Workloads: what the gateway decodes (1, 8 and 64 prompts of tiers 1-8: a batch of its clients' prompts), practice
and RL (512 of tiers 1-8, 2,048 of tiers 1-16), and a sealed eval that grew past the champion (400 prompts of 1-200
digits). `--step-cost` overrides STEP_COST, what a decoding step's fixed cost is worth in tokens, to fit it.
"""

import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rmi_pipeline.recipes.arithmetic import recipe as arithmetic  # noqa: E402

WORKLOADS = [(1, 1, 8, 200), (8, 1, 8, 100), (64, 1, 8, 30), (512, 1, 8, 4), (2048, 1, 16, 1), (400, 1, 200, 1)]


def problems(k: int, lo: int, hi: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(k):
        n = rng.randint(lo, hi)
        a, b = sorted((rng.randrange(10 ** (n - 1), 10**n), rng.randrange(0, 10**n)), reverse=True)
        out.append(f"{a}{rng.choice('+-')}{b}=")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--step-cost", type=int, default=arithmetic.STEP_COST)
    args = parser.parse_args()
    arithmetic.STEP_COST = args.step_cost
    grouped = arithmetic._groups
    recipe = arithmetic.ArithmeticRecipe()
    torch.manual_seed(0)
    model = recipe.build_model(3e-3, 10, args.size)
    print(f"{args.size} model, untrained, {torch.get_num_threads()} threads, STEP_COST {args.step_cost}; "
          "best of two turns each")
    for k, lo, hi, repeats in WORKLOADS:
        prompts = problems(k, lo, hi)
        seconds: dict[str, list[float]] = {}
        answers = {}
        for name, rule in [("by width", arithmetic._by_width), ("grouped", grouped)] * 2:
            arithmetic._groups = rule
            started = time.perf_counter()
            for _ in range(repeats):
                answers[name] = recipe.answer(model, prompts)
            seconds.setdefault(name, []).append((time.perf_counter() - started) / repeats)
        base, new = min(seconds["by width"]), min(seconds["grouped"])
        print(f"{k:5d} prompts of {lo}-{hi} digits: by width {base * 1000:8.1f} ms, grouped {new * 1000:8.1f} ms "
              f"({base / new:.2f}x); identical answers: {answers['by width'] == answers['grouped']}", flush=True)
    arithmetic._groups = grouped


if __name__ == "__main__":
    main()
