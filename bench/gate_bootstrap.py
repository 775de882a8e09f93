"""The gate's bootstrap interval, percentile (the gate's own: multinomial resamples, each slice's spread widened by
sqrt(n/(n-1))) against BCa (scipy.stats.bootstrap), in the same seeded trials.

    python bench/gate_bootstrap.py [--trials 400] [--confidences 0.95,0.98] [--seed 0] [--equal-only]
                                   [--grown-trials 200]

Each trial draws 14 slices of 100 items (true accuracies uniform in 0.2-0.9, as tests/test_gate.py's trials); the
champion answers at the truth, the challenger at the truth (equal) or 5 points below it on one slice (worse). Per
method and confidence: the share of equal challengers promoted (a false promotion; the nominal rate of the
one-sided lower bound is (1 - confidence) / 2) and of worse ones rejected, and the seconds one decision takes.
Beside them, the share of the same equal trials a normal-theory test would pass (gain over its standard error
above the same quantile): how far these trials' own draws sit from the nominal rate, whatever the interval.

Then the slice guard on a grown suite (14, 40 and 80 slices of 200 items, true accuracies 0.85-0.99, as a long
climb's suite): the share of equal challengers with some slice flagged as fallen, by the gate's rule (a sign test
per slice, the false discovery rate held over all of them) beside the per-slice rule it replaced (an interval wholly
below zero), and the share of challengers whose first slice truly fell by 0.10, 0.15 or 0.20 that each rule catches.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rmi_pipeline.ml.gate import Paired, decide  # noqa: E402
from rmi_pipeline.settings import Gate  # noqa: E402

SLICES = [f"{skill}/{tier}" for skill in ("add", "sub") for tier in range(2, 9)]


def trials_of(worse_by: float, trials: int, seed: int):
    rng = np.random.default_rng(seed)  # the same draws for every method and confidence
    for _ in range(trials):
        truth = rng.uniform(0.2, 0.9, size=len(SLICES))
        yield {name: Paired((rng.random(100) < truth[i] - (worse_by if i == 3 else 0.0)).astype(float),
                            (rng.random(100) < truth[i]).astype(float)) for i, name in enumerate(SLICES)}


def promoted_share(worse_by: float, trials: int, gate, method: str, seed: int) -> tuple[float, float]:
    """(share promoted, seconds per decision) over `trials` seeded trials."""
    started = time.perf_counter()
    promoted = sum(decide(slices, set(SLICES), gate, seed=t, method=method).promote
                   for t, slices in enumerate(trials_of(worse_by, trials, seed)))
    return promoted / trials, (time.perf_counter() - started) / trials


def normal_share(trials: int, confidence: float, seed: int) -> float:
    """Share of the equal trials whose mean gain is above its standard error times the one-sided quantile."""
    from scipy.stats import norm

    z, passed = norm.ppf(1 - (1 - confidence) / 2), 0
    for slices in trials_of(0.0, trials, seed):
        d = [p.challenger - p.champion for p in slices.values()]
        gain = np.mean([x.mean() for x in d])
        passed += gain > z * np.sqrt(sum(x.var(ddof=1) / len(x) for x in d)) / len(d)
    return passed / trials


def guard_rates(slices: int, fall: float, trials: int, gate, seed: int) -> tuple[float, float]:
    """(share flagged by the gate's rule, by the per-slice rule): any slice when `fall` is 0, else the fallen one."""
    rng = np.random.default_rng(seed)
    names = [f"add/{i + 1}" for i in range(slices)]
    flagged = per_slice = 0
    for t in range(trials):
        truth = rng.uniform(0.85, 0.99, size=slices)
        suite = {name: Paired((rng.random(200) < truth[i] - (fall if i == 0 else 0)).astype(float),
                              (rng.random(200) < truth[i]).astype(float)) for i, name in enumerate(names)}
        results = [r for r in decide(suite, set(names), gate, seed=t).slices if not fall or r.name == "add/1"]
        flagged += any(r.regressed for r in results)
        per_slice += any(r.delta < -gate.slice_tolerance and r.high < 0 for r in results)
    return flagged / trials, per_slice / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--confidences", default="0.95,0.98")
    parser.add_argument("--seed", type=int, default=0, help="of the trials' draws")
    parser.add_argument("--equal-only", action="store_true", help="only the false promotions")
    parser.add_argument("--grown-trials", type=int, default=200, help="trials per cell of the slice guard's table")
    args = parser.parse_args()
    base = Gate.model_construct()
    print(f"{args.trials} trials each (draws of seed {args.seed}); {base.resamples} resamples")
    print("| method | confidence | nominal false promotion | equal promoted | normal test, same trials "
          "| 5 points worse rejected | s/decision |")
    print("|---|---|---|---|---|---|---|")
    for confidence in map(float, args.confidences.split(",")):
        gate = base.model_copy(update={"confidence": confidence})
        for method in ("percentile", "BCa"):
            equal, seconds = promoted_share(0.0, args.trials, gate, method, args.seed)
            rejected = "-" if args.equal_only else \
                f"{1 - promoted_share(0.05, args.trials, gate, method, args.seed)[0]:.2%}"
            normal = normal_share(args.trials, confidence, args.seed)
            print(f"| {method} | {confidence:.2f} | {(1 - confidence) / 2:.1%} | {equal:.2%} | {normal:.2%} "
                  f"| {rejected} | {seconds:.3f} |", flush=True)
    guard = base.model_copy(update={"resamples": 200})  # the guard's rules do not rest on the resamples
    print(f"\nslice guard, {args.grown_trials} trials each: gate's rule / per-slice rule")
    print("| slices | equal challenger flagged | fell 0.10 caught | fell 0.15 caught | fell 0.20 caught |")
    print("|---|---|---|---|---|")
    for slices in (14, 40, 80):
        cells = [guard_rates(slices, fall, args.grown_trials, guard, args.seed) for fall in (0.0, 0.10, 0.15, 0.20)]
        print(f"| {slices} | " + " | ".join(f"{a:.0%} / {b:.0%}" for a, b in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
