"""The promotion gate: paired bootstrap intervals on per-item scores, and a verdict a person can read.

Per-item scores are in [0, 1]: 0/1 correctness, or graded (token F1, a judge's share of criteria passed). Every test
below holds for both; 0/1 scores keep their fast exact paths.

A challenger is promoted only if
- its overall gain (mean over the counted slices of challenger minus champion) has a lower confidence bound
  above `min_gain`, and equal models would seldom show a gain as large (a randomization test at the interval's
  one-sided level): a gain the eval's noise could explain is not a gain;
- no slice falls by more than `slice_tolerance`, significantly: a sign test on the items where the two models
  differ (McNemar's exact test on 0/1 scores), at the interval's one-sided level after the Benjamini-Hochberg step
  over every slice. The suite grows a slice per tier, and at 80 slices the per-slice rule (any interval wholly below
  zero) flags a slice of two equal models in 52% of trials (bench/gate_bootstrap.py): each promotion would be a
  lottery;
- no leak signal: on a set it could have seen (the public set, the frozen anchor) it does not gain more than
  `leak_gap` beyond what it gains on a set it cannot have seen (the private pool, the fresh refreshed set), by more
  than the two sets' noise explains (a gap significant at the interval's one-sided level: an eval file's held-out
  part of 60 items moved 0.13 from the anchor's gain between two equal draws).
With no champion, the first model is promoted if the lower bound of its score reaches `first_floor`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist

import numpy as np

from ..settings import Gate


@dataclass
class Paired:
    """Per-item scores in [0, 1] (0/1 correctness or graded) of challenger and champion on the same items, in the
    same order."""

    challenger: np.ndarray
    champion: np.ndarray | None = None


@dataclass
class SliceResult:
    name: str
    items: int
    challenger: float
    champion: float | None
    delta: float | None
    low: float | None
    high: float | None
    counted: bool
    regressed: bool = False
    p_worse: float | None = None  # one-sided sign-test p-value that the challenger is worse here


@dataclass
class Decision:
    promote: bool
    reason: str
    challenger_mean: float
    champion_mean: float | None
    gain: float | None
    gain_low: float | None
    gain_high: float | None
    slices: list[SliceResult] = field(default_factory=list)
    leaks: dict[str, float] = field(default_factory=dict)
    p_chance: float | None = None  # the randomization test's p-value of the gain between equal models

    def as_dict(self) -> dict:
        return asdict(self)


METHOD = "percentile"  # bench/gate_bootstrap.py measured BCa (scipy.stats.bootstrap's) beside it


def interval(samples: list[np.ndarray], confidence: float, resamples: int, rng: np.random.Generator,
             method: str = METHOD) -> tuple[float, float]:
    """The bootstrap interval of the mean over `samples` of each one's mean, each sample resampled on its own (a
    slice is a stratum: the overall gain keeps every slice's size in every resample). Graded scores need nothing
    else: a resampled mean is a resampled mean whatever values the items hold; only the way of drawing it changes."""
    if all(np.ptp(sample) == 0 for sample in samples):  # nothing varies (say, two models right on the same items)
        value = float(np.mean([sample.mean() for sample in samples]))
        return value, value
    if method == "percentile":
        # a resample of a sample holds each of its few values (0 and 1; -1, 0 and 1 for paired deltas) a multinomial
        # number of times: the same bootstrap distribution as drawing items, without resamples x items indices
        # (scipy's bootstrap took 0.3 s a cycle on 36 slices); graded scores with many values draw items instead
        means = np.zeros(resamples)
        for sample in samples:
            n, mean = len(sample), sample.mean()
            values, counts = np.unique(sample, return_counts=True)
            if _few(len(values), n):
                drawn = rng.multinomial(n, counts / n, size=resamples) @ values / n
            else:
                drawn = np.concatenate([sample[rng.integers(0, n, size=(rows, n))].mean(axis=1)
                                        for rows in _chunks(resamples, n)])
            # a resample's spread is (n-1)/n of the sample's variance: on slices of a few items (the horizon's)
            # that made an equal challenger's gain look real (4% promoted against the nominal 1%); scipy's methods
            # (bench/gate_bootstrap.py) are not widened
            if n > 1:  # kept within the values seen, as any resample is (a score stays at or above 0)
                drawn = np.clip(mean + (drawn - mean) * math.sqrt(n / (n - 1)), values[0], values[-1])
            means += drawn
        tail = (1 - confidence) / 2
        low, high = np.quantile(means / len(samples), [tail, 1 - tail])
        return float(low), float(high)
    from scipy.stats import bootstrap

    result = bootstrap(samples, _mean_of_means, n_resamples=resamples, confidence_level=confidence, method=method,
                       vectorized=True, paired=False, rng=rng)
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _mean_of_means(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean([sample.mean(axis=axis) for sample in samples], axis=0)


_CHUNK = 1 << 20  # resampled items held at once: 8 MB of float64, whatever the slice's size


def _few(distinct: int, items: int) -> bool:
    """Whether drawing per distinct value (a multinomial, a binomial) beats drawing per item: always for -1, 0 and 1
    (0/1 scores keep their exact, fast path), and for graded scores when each value is shared by 16 items or more
    (measured: a multinomial category costs about 16 drawn items)."""
    return distinct <= 3 or distinct * 16 <= items


def _chunks(resamples: int, items: int) -> list[int]:
    """Resamples per chunk, so that a chunk holds at most `_CHUNK` drawn items."""
    rows = max(1, _CHUNK // max(items, 1))
    return [min(rows, resamples - start) for start in range(0, resamples, rows)]


def decide(slices: dict[str, Paired], counted: set[str], gate: Gate, *,
           leak_pairs: dict[str, tuple[Paired, Paired]] | None = None, seed: int = 0,
           method: str = METHOD) -> Decision:
    """`counted` slices make the overall score; every slice is guarded against regression. `method`: the
    bootstrap interval's (scipy.stats.bootstrap: "percentile", "BCa", "basic")."""
    confidence, resamples, tolerance = gate.confidence, gate.resamples, gate.slice_tolerance
    min_gain, first_floor, leak_gap = gate.min_gain, gate.first_floor, gate.leak_gap
    if not counted:
        raise ValueError("the eval suite has no private slice: nothing honest to gate on")
    rng = np.random.default_rng(seed)
    first = any(p.champion is None for p in slices.values())
    results, values_of = [], {}
    for name, pair in sorted(slices.items()):
        a = np.asarray(pair.challenger, dtype=float)
        values = values_of[name] = a if first else a - np.asarray(pair.champion, dtype=float)
        low, high = interval([values], confidence, resamples, rng, method)
        if first:
            results.append(SliceResult(name, len(a), float(a.mean()), None, None, low, high, name in counted))
            continue
        results.append(SliceResult(name, len(a), float(a.mean()), float(pair.champion.mean()), float(values.mean()),
                                   low, high, name in counted, p_worse=p_worse(values)))
    new = float(np.mean([r.challenger for r in results if r.counted]))
    low, high = interval([values_of[name] for name in sorted(counted)], confidence, resamples, rng, method)
    level = f"{confidence:.0%}"
    if first:
        ok = low >= first_floor
        why = (f"No champion yet: the first model scores {new:.3f} on the counted slices ({level} interval "
               f"{low:.3f} to {high:.3f}), {'at or above' if ok else 'below'} the floor {first_floor:.3f}.")
        return Decision(ok, why, new, None, None, low, high, results)

    # the false discovery rate held over every slice: where none truly fell, the chance of flagging any is at most
    # the one-sided level, however many slices the suite has grown
    adjusted = _benjamini_hochberg([r.p_worse for r in results])
    for r, p in zip(results, adjusted, strict=True):
        r.regressed = bool(p <= (1 - confidence) / 2) and r.delta < -tolerance
    old = float(np.mean([r.champion for r in results if r.counted]))
    gain = new - old
    p_chance = _p_chance([values_of[name] for name in sorted(counted)], gain, resamples, rng)
    decision = Decision(False, "", new, old, gain, low, high, results, p_chance=p_chance)
    beyond_noise = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    leaks = {}
    for name, (seen, fresh) in (leak_pairs or {}).items():
        if len(seen.challenger) and len(fresh.challenger):  # a recipe may have no public set
            gap, z = _gap(seen, fresh)
            decision.leaks[name] = gap
            if gap > leak_gap and z > beyond_noise:
                leaks[name] = gap
    regressed = [r for r in results if r.regressed]
    summary = f"gain {gain:+.3f} ({level} interval {low:+.3f} to {high:+.3f})"
    if leaks:
        name, gap = max(leaks.items(), key=lambda kv: kv[1])
        decision.reason = (f"Blocked as a likely leak: {name} gains {gap:+.3f} more than the unseen set "
                           f"(threshold {leak_gap:.2f}); overall {summary}.")
    elif regressed:
        worst = min(regressed, key=lambda r: r.delta)
        decision.reason = (f"Not promoted: slice {worst.name} falls {worst.delta:+.3f} (interval {worst.low:+.3f} "
                           f"to {worst.high:+.3f}; sign test p {worst.p_worse:.1g}, significant among {len(results)} "
                           f"slices), past the tolerance {tolerance:.2f}; overall {summary}.")
    elif low <= min_gain or p_chance > (1 - confidence) / 2:
        decision.reason = (f"Not promoted: the {summary} is not significantly above {min_gain:+.3f} "
                           f"({new:.3f} vs champion {old:.3f} on the counted slices; equal models would gain as much "
                           f"with p {p_chance:.2g}).")
    else:
        decision.promote = True
        decision.reason = (f"Promoted: {new:.3f} vs champion {old:.3f} on the counted slices, {summary}, and no "
                           f"slice falls past the tolerance {tolerance:.2f}.")
    return decision


def _p_chance(samples: list[np.ndarray], gain: float, resamples: int, rng: np.random.Generator) -> float:
    """The one-sided p-value that models of equal skill show `gain` (the mean of the samples' means) or more: were
    the two interchangeable, each paired difference would be as likely negated (a sign flip per item, every slice
    keeping its weight), for 0/1 and graded scores alike. It holds its level on slices of a few items, where the
    bootstrap's interval is too narrow (an equal challenger beside 7 slices of 2-6 items: promoted in 3% of trials
    against the nominal 1%)."""
    flipped = np.zeros(resamples)
    for sample in samples:
        flipped += _flipped_sums(sample, resamples, rng) / len(sample)
    at_least = int(np.count_nonzero(flipped / len(samples) >= gain - 1e-12))
    return (1 + at_least) / (1 + resamples)


def _flipped_sums(sample: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`resamples` sums of the sample's differences, each with a random sign. The items sharing a size flip as one
    binomial draw: the flipped sum of k differences of size v is v (2 Binomial(k, 1/2) - k), exact and fast for 0/1
    scores (one size, 1) and for graded scores with few values; many sizes draw a sign per item, in chunks."""
    sizes, counts = np.unique(np.abs(sample[sample != 0]), return_counts=True)
    if _few(len(sizes), int(counts.sum())):
        sums = np.zeros(resamples)
        for size, count in zip(sizes, counts, strict=True):
            sums += size * (2 * rng.binomial(count, 0.5, size=resamples) - count)
        return sums
    differences = np.abs(sample[sample != 0])
    total = differences.sum()
    return np.concatenate([2 * (rng.integers(0, 2, size=(rows, len(differences)), dtype=bool) @ differences) - total
                           for rows in _chunks(resamples, len(differences))])


def p_worse(values: np.ndarray) -> float:
    """The sign test's one-sided p-value that the challenger is worse: of the items where the two differ, the
    chance that at least this many go the champion's way if either way were as likely (scipy.stats.binomtest's,
    summed exactly here: importing scipy.stats cost a cycle's process 0.5 s). On graded scores it counts the items
    that fell against those that rose, not by how much: it keeps its level (equal models make either sign as likely)
    and the slice must also fall past the tolerance on average to be called regressed."""
    worse, better = int((values < 0).sum()), int((values > 0).sum())
    if not worse:
        return 1.0
    n = worse + better
    term = total = math.comb(n, worse)  # C(n, k) for k = worse .. n
    for k in range(worse, n):
        term = term * (n - k) // (k + 1)
        total += term
    return total / 2 ** n


def _benjamini_hochberg(p_values: list[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (scipy.stats.false_discovery_control's "bh")."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p)
    stepped = np.minimum.accumulate((p[order] * len(p) / np.arange(1, len(p) + 1))[::-1])[::-1]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def _gain(pair: Paired) -> float:
    return float(np.mean(pair.challenger) - np.mean(pair.champion))


def _gap(seen: Paired, fresh: Paired) -> tuple[float, float]:
    """(the gain on `seen` minus the gain on `fresh`, how many standard errors that is from zero): each gain a mean
    of paired differences, the two sets independent."""
    a, b = (np.asarray(p.challenger, float) - np.asarray(p.champion, float) for p in (seen, fresh))
    gap = float(a.mean() - b.mean())
    se = math.sqrt(sum(d.var(ddof=1) / len(d) for d in (a, b) if len(d) > 1))
    return gap, (gap / se if se else math.copysign(math.inf, gap) if gap else 0.0)


def markdown(decision: Decision) -> str:
    """The verdict as the UI shows it: one sentence, then every slice with its delta and interval."""
    lines = [decision.reason, ""]
    if decision.p_chance is not None:
        lines += [f"Equal models (each item where they differ going either way) would show this gain or more with p "
                  f"{decision.p_chance:.2g}.", ""]
    lines += ["| slice | items | counted | challenger | champion | delta | interval | p worse | |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in decision.slices:
        champ = "-" if r.champion is None else f"{r.champion:.2f}"
        delta = "-" if r.delta is None else f"{r.delta:+.2f}"
        p_text = "-" if r.p_worse is None else f"{r.p_worse:.2g}"
        flag = "regressed" if r.regressed else ""
        lines.append(f"| {r.name} | {r.items} | {'yes' if r.counted else 'no'} | {r.challenger:.2f} | {champ} | "
                     f"{delta} | {r.low:+.2f} to {r.high:+.2f} | {p_text} | {flag} |")
    if decision.leaks:
        lines += ["", "Leak signals (gain on a set the model could have seen minus gain on an unseen set): "
                  + ", ".join(f"{k} {v:+.3f}" for k, v in decision.leaks.items())]
    return "\n".join(lines)
