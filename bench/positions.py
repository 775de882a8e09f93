"""How far past its training a position scheme lets the arithmetic model answer.

    python bench/positions.py [--steps 6000] [--seeds 0] [--schemes relative,slopes,none]

Each scheme trains the tiny model (2 layers, 2 heads, 64 wide) from scratch on the recipe's seed set only (sums and
differences of 1-3 digits) for the same steps, then answers 200 fresh problems per skill at each tier up to 16
digits, greedy. Printed: the share right per tier, and the longest tier at 0.9.
- relative  the default: per head a learned score for each signed place distance (clipped at 4) plus minus a slope
            times the distance (slopes 1 and 0): nothing depends on length;
- slopes    the slopes alone, no learned distances;
- none      no positions at all (NoPE): only the causal mask and the segment embeddings tell tokens apart.
"""

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rmi_pipeline.ml.train import fit  # noqa: E402
from rmi_pipeline.recipes.arithmetic import (
    ArithmeticRecipe,  # noqa: E402
    tokens,  # noqa: E402
)

TIERS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
TINY = {"vocab_size": len(tokens.VOCAB), **ArithmeticRecipe.sizes["tiny"]}
SCHEMES = {"relative": TINY, "slopes": {**TINY, "relative": 0}, "none": {**TINY, "slopes": None, "relative": 0}}


def longest(scores: dict, skill: str, saturation: float = 0.9) -> int:
    top = 0
    for tier in TIERS:
        if scores[(skill, tier)] < saturation:
            break
        top = tier
    return top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    args = parser.parse_args()
    recipe = ArithmeticRecipe()
    print(f"{'scheme':>9} {'seed':>4} {'skill':>5} " + " ".join(f"{t:>5}" for t in TIERS) + "  longest at 0.9  train s")
    for name in args.schemes.split(","):
        for seed in map(int, args.seeds.split(",")):
            torch.manual_seed(seed)
            tasks = recipe.seed_tasks(random.Random(seed))
            model = recipe.build_model(3e-3, args.steps, config=SCHEMES[name])
            started = time.perf_counter()
            fit(model, *recipe.encode(model, [t.prompt for t in tasks], [t.answer for t in tasks]),
                max_steps=args.steps, max_seconds=3600, batch_size=64, seed=seed)
            seconds = time.perf_counter() - started
            scores = {(skill, tier): sum(recipe.correct(model, fresh)) / len(fresh) for skill in recipe.skills
                      for tier in TIERS for fresh in [recipe.sample_tasks(random.Random(99), 200, [skill], [tier])]}
            for skill in recipe.skills:
                cells = " ".join(f"{scores[(skill, t)]:5.2f}" for t in TIERS)
                print(f"{name:>9} {seed:>4} {skill:>5} {cells}  {longest(scores, skill):>14}  {seconds:7.0f}",
                      flush=True)


if __name__ == "__main__":
    main()
