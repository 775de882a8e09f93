"""Choosing one of K challengers at the gate's default settings (issue 57), by each honest rule: how often the best
of K equal candidates is promoted, and how often a candidate 5 points better is the one promoted.

- corrected (the default, RMI_SELECTION_SHARE=0): the best on every item, gated on every item at the gate's one-sided
  level divided by K;
- split (RMI_SELECTION_SHARE in (0, 1), here --share): the best on the selection part, gated on the confirmation
  part at the gate's own level;
- naive (neither rule: what they guard against): the best on every item, gated on the same items at the gate's own
  level. Its row of equal candidates shows the optimism the two rules remove; its verdicts come with the first
  rule's equal trials, and their time is counted in that rule's row.

    python bench/challengers.py [--trials 1000] [--ks 1,2,4,8] [--rules corrected,split] [--share 0.5] [--seed 0]

The trials are tests/test_selection.py's (14 slices x 120 items, each item's difficulty shared by every model, each
model's answers its own draws; 0/1 and graded scores), gated here at the loop's defaults (confidence 0.98: a
nominal false promotion of 1% a side) where the test uses 80% to see optimism in few trials. With one candidate there
is nothing to choose and the rules are the same: one row, rule "any". Each share comes with its 95% Wilson interval;
s/trial is a row's seconds over its trials, equal and better together.
"""

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_selection import RULES, trial  # noqa: E402

from rmi_pipeline.settings import Gate  # noqa: E402


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of hits / n: honest near 0%, where the false promotions sit."""
    p, scale = hits / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / scale, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / scale
    return max(0.0, centre - half), min(1.0, centre + half)


def cell(hits: int, n: int) -> str:
    low, high = wilson(hits, n)
    return f"{hits / n:.1%} ({low:.1%}-{high:.1%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1000, help="per score kind, K and rule, equal and better each")
    parser.add_argument("--ks", default="1,2,4,8", help="candidates per cycle")
    parser.add_argument("--rules", default=",".join(RULES), help=f"of {', '.join(RULES)}, in the order run")
    parser.add_argument("--share", type=float, default=0.5, help="of each slice's items in the split rule's "
                        "selection part")
    parser.add_argument("--seed", type=int, default=0, help="of the trials' draws (trial t draws seed x 10^6 + t)")
    args = parser.parse_args()
    rules = args.rules.split(",")
    if unknown := [rule for rule in rules if rule not in RULES]:
        parser.error(f"no rule {', '.join(unknown)}: the rules are {', '.join(RULES)}")
    gate = Gate.model_construct()  # the loop's defaults, whatever the environment says
    seeds = [args.seed * 10**6 + t for t in range(args.trials)]
    started = time.perf_counter()
    print(f"{args.trials} trials per row (seed {args.seed}); gate at confidence {gate.confidence} "
          f"({(1 - gate.confidence) / 2:.0%} a side, divided by K for corrected), {gate.resamples} resamples; split "
          f"share {args.share}")
    print("| scores | K | rule | equal candidates: winner promoted | 5 points better: it is promoted | s/trial |")
    print("|---|---|---|---|---|---|")
    for kind in ("exact", "graded"):
        for k in map(int, args.ks.split(",")):
            naive = None
            for rule in rules if k > 1 else rules[:1]:  # one candidate: every rule gates it alike
                row = time.perf_counter()
                first = naive is None and k > 1
                equal = [trial(kind, k, s, gate, rule, naive=first, share=args.share) for s in seeds]
                better = [trial(kind, k, s, gate, rule, better=True, share=args.share) for s in seeds]
                if first:
                    naive = sum(bool(t.naive_promoted) for t in equal)
                seconds = (time.perf_counter() - row) / (2 * args.trials)
                named = rule if k > 1 else "any"
                print(f"| {kind} | {k} | {named} | {cell(sum(t.promoted for t in equal), args.trials)} "
                      f"| {cell(sum(t.better_promoted for t in better), args.trials)} | {seconds:.3f} |", flush=True)
            if naive is not None:
                print(f"| {kind} | {k} | naive | {cell(naive, args.trials)} | - | - |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
