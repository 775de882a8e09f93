"""The live verdict on a canary: are the users it answers worse off than the champion's, over the same period?

Per slice, the thumbs-down rate of the canary's answers against the champion's, compared within each period (a
feedback batch: both arms answered during the same minutes) and the periods pooled with Mantel-Haenszel weights
(n_canary * n_champion / (n_canary + n_champion)). Whatever changes over time (users moving to harder questions, a
monitor that reports more on one day) moves both arms of a period alike and cancels; a plain two-proportion test on
the totals would blame the canary for a drift that began while it served. The difference gets a normal interval
(the variance of each period's difference from the arms' rates on the slice); a bootstrap would need the events one
by one and says nothing more at these counts. Every judged slice is tested at once, so each interval is
Bonferroni-widened: with the gate's 98%, the chance that an equal canary looks worse on any slice stays under 1%.
A canary is worse on a slice when the whole interval lies above `tolerance`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist

MIN_PER_ARM = 20  # rated answers per arm a slice needs before it is judged


@dataclass(frozen=True)
class Period:
    """Rated answers and thumbs-down of each arm on one slice in one period."""

    canary_rated: int
    canary_down: int
    champion_rated: int
    champion_down: int


@dataclass
class LiveSlice:
    name: str
    canary_rated: int
    champion_rated: int
    canary_down: float | None
    champion_down: float | None
    delta: float | None = None  # canary minus champion, thumbs-down rate, periods pooled
    low: float | None = None
    high: float | None = None
    judged: bool = False
    worse: bool = False


PROMOTE, ABORT, WAIT = "promote", "abort", "wait"


@dataclass
class CanaryVerdict:
    action: str  # PROMOTE, ABORT or WAIT (for more rated answers)
    reason: str
    canary_rated: int
    champion_rated: int
    timed_out: bool = False
    slices: list[LiveSlice] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def compare(name: str, periods: list[Period]) -> tuple[LiveSlice, float | None]:
    """One slice's pooled difference, and its standard error (None: too few answers to judge)."""
    n1, n0 = sum(p.canary_rated for p in periods), sum(p.champion_rated for p in periods)
    d1, d0 = sum(p.canary_down for p in periods), sum(p.champion_down for p in periods)
    out = LiveSlice(name, n1, n0, d1 / n1 if n1 else None, d0 / n0 if n0 else None)
    paired = [p for p in periods if p.canary_rated and p.champion_rated]
    if min(n1, n0) < MIN_PER_ARM or not paired:
        return out, None
    weights = [p.canary_rated * p.champion_rated / (p.canary_rated + p.champion_rated) for p in paired]
    total = sum(weights)
    out.delta = sum(w * (p.canary_down / p.canary_rated - p.champion_down / p.champion_rated)
                    for w, p in zip(weights, paired, strict=True)) / total
    # each arm's rate on the slice, kept off 0 and 1 so that a slice nobody disliked yet still has a spread
    r1, r0 = (d1 + 0.5) / (n1 + 1), (d0 + 0.5) / (n0 + 1)
    variance = sum(w * w * (r1 * (1 - r1) / p.canary_rated + r0 * (1 - r0) / p.champion_rated)
                   for w, p in zip(weights, paired, strict=True)) / total ** 2
    out.judged = True
    return out, math.sqrt(variance)


def compare_all(periods: dict[str, list[Period]], confidence: float, tolerance: float) -> list[LiveSlice]:
    """Every slice compared, with its interval (Bonferroni over the judged slices) and whether it is worse."""
    compared = [compare(name, ps) for name, ps in sorted(periods.items())]
    judged = sum(spread is not None for _, spread in compared)
    z = NormalDist().inv_cdf(1 - (1 - confidence) / (2 * max(1, judged)))
    for s, spread in compared:
        if spread is not None:
            s.low, s.high = s.delta - z * spread, s.delta + z * spread
            s.worse = s.low > tolerance
    return [s for s, _ in compared]


def judge(periods: dict[str, list[Period]], *, confidence: float, tolerance: float, min_events: int,
          timed_out: bool, canary_version: str, champion_version: str, against: str = "champion") -> CanaryVerdict:
    """The verdict over every slice: abort when the canary is worse on one, promote when it has answered
    `min_events` rated questions and is worse on none; `timed_out` decides on what there is: the offline gate
    already found the canary better, so a canary users did not find worse is promoted. `against`: the alias whose
    version `champion_version` is (a derivative's canary is trialled against `fast`)."""
    slices = compare_all(periods, confidence, tolerance)
    judged = [s for s in slices if s.judged]
    n1, n0 = sum(s.canary_rated for s in slices), sum(s.champion_rated for s in slices)
    worse = sorted((s for s in judged if s.worse), key=lambda s: -s.low)
    level = f"{confidence:.0%} interval, {len(judged)} slice{'s' if len(judged) != 1 else ''} judged at once"
    if worse:
        w = worse[0]
        reason = (f"Aborted: canary v{canary_version} is worse for users than {against} v{champion_version} on "
                  f"{', '.join(s.name for s in worse)}; on {w.name} thumbs-down {w.canary_down:.3f} against "
                  f"{w.champion_down:.3f}, {w.delta:+.3f} ({level}: {w.low:+.3f} to {w.high:+.3f}), past the "
                  f"tolerance {tolerance:+.3f}.")
        return CanaryVerdict(ABORT, reason, n1, n0, timed_out, slices)
    if n1 < min_events and not timed_out:
        return CanaryVerdict(WAIT, f"Waiting: {n1:,} of {min_events:,} rated canary answers, worse on no slice "
                             "so far.", n1, n0, False, slices)
    closest = max(judged, key=lambda s: s.high, default=None)
    evidence = (f"its worst slice {closest.name} {closest.delta:+.3f} thumbs-down ({level}: {closest.low:+.3f} to "
                f"{closest.high:+.3f})" if closest else "no slice had enough rated answers to judge")
    start = (f"Timed out with {n1:,} of {min_events:,} rated canary answers; promoted on the offline gate's "
             "evidence, as users did not find it worse" if timed_out and n1 < min_events else "Promoted")
    reason = (f"{start}: over {n1:,} rated canary answers and {n0:,} of the {against}'s in the same period, canary "
              f"v{canary_version} is not worse than v{champion_version} past the tolerance {tolerance:+.3f} on any "
              f"slice; {evidence}.")
    return CanaryVerdict(PROMOTE, reason, n1, n0, timed_out, slices)
