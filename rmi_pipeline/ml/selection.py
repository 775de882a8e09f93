"""Choosing one of K challengers without promoting luck.

A cycle may train K candidate challengers and keep the best; picked on the eval that then gates it, the best of K
is the luckiest of K, and the gate promotes that luck. Two honest rules, both measured (bench/challengers.py):
- corrected (the default): every candidate answers every item, the best wins (`select`), and the gate judges it at
  its one-sided level divided by K (`corrected`, Bonferroni): the chance that any of K equal candidates passes is
  at most the level of one. Its reported gain leans high (it is the winner's, on the items that chose it).
- split: the items are split per slice, by a salted hash of each item's key (`in_selection`); the best on the
  selection part wins, and the gate judges it on the confirmation part only, items the choice never saw: an
  unbiased gain, on fewer items, so less power.
With one candidate there is nothing to choose: the gate sees every item at its own level.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..settings import Gate
from .gate import interval


def in_selection(strata: Sequence[str], keys: Sequence[str], share: float, salt: str) -> np.ndarray:
    """Which items are in the selection part (True) rather than the confirmation part: per stratum (a slice), the
    items ordered by a salted hash of their keys, the first round(share * n) in selection, a half going to
    confirmation (the gate's part, whose level must hold). A stratum of two items or more keeps one in each part, so
    every slice is both chosen on and guarded; a stratum of one item goes to confirmation, where the gate guards it.
    The hash, not the order given, decides: the same items split the same way however they are listed."""
    if not 0 < share < 1:
        raise ValueError(f"the selection share must be between 0 and 1, exclusive; got {share}")
    if len(strata) != len(keys):
        raise ValueError(f"{len(strata)} strata for {len(keys)} keys: each item needs one of each")
    members: dict[str, list[int]] = defaultdict(list)
    for i, stratum in enumerate(strata):
        members[stratum].append(i)
    mask = np.zeros(len(keys), dtype=bool)
    for items in members.values():
        n = len(items)
        if n < 2:
            continue
        chosen = min(max(math.ceil(share * n - 0.5), 1), n - 1)
        # the key breaks a tie of hashes, so that order given never decides
        ranked = sorted(items, key=lambda i: (_hashed(salt, keys[i]), keys[i]))
        mask[ranked[:chosen]] = True
    return mask


def _hashed(salt: str, key: str) -> bytes:
    return hashlib.blake2b(f"{salt}\0{key}".encode(), digest_size=16).digest()


@dataclass
class Candidate:
    index: int
    version: str
    score: float  # the mean over the counted slices of each one's mean, on the items that choose
    low: float
    high: float
    items: int  # counted items in the score


@dataclass
class Selection:
    winner: int  # index into candidates
    candidates: list[Candidate]
    spread: float  # best score minus worst: how much the K candidates differ at all
    runner_up_gap: float | None  # winner minus second best; None for one candidate
    gap_low: float | None
    gap_high: float | None
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


def corrected(gate: Gate, candidates: int) -> Gate:
    """The gate for the best of `candidates` chosen on the items it then judges: its one-sided level divided by their
    number (Bonferroni), so that any of K equal candidates passes at most as often as one would."""
    if candidates <= 1:
        return gate
    return gate.model_copy(update={"confidence": 1 - (1 - gate.confidence) / candidates})


def select(scores: Sequence[Mapping[str, np.ndarray]], versions: Sequence[str], counted: set[str],
           confidence: float, resamples: int, seed: int = 0) -> Selection:
    """The winner is the candidate with the highest score on the items that choose (`scores[m][slice]`: candidate m's
    per-item scores there, on every item or the selection part, every candidate on the same items in the same
    order), the score being the gate's own (the mean over counted slices of each one's mean); a tie goes to the
    lowest index, so the same scores pick the same winner. The intervals (the gate's bootstrap, each counted slice
    a stratum; the winner's gap over the runner-up paired per item) say how clear the choice was; they never change
    it."""
    if not scores:
        raise ValueError("no candidate to select from")
    if len(versions) != len(scores):
        raise ValueError(f"{len(versions)} versions for {len(scores)} candidates")
    # a counted slice with no items here (a split sent its single item to confirmation) has nothing to choose by
    used = sorted(name for name in counted if name in scores[0] and len(scores[0][name]))
    if not used:
        raise ValueError("no counted slice has items to choose by: nothing to choose the candidates by")
    for version, candidate in zip(versions, scores, strict=True):
        if missing := [name for name in used if name not in candidate]:
            raise ValueError(f"candidate {version} has no scores on {', '.join(missing)}: candidates must be scored "
                             f"on the same items")
    per_slice = [[np.asarray(candidate[name], dtype=float) for name in used] for candidate in scores]
    for m, samples in enumerate(per_slice):
        for name, sample, first in zip(used, samples, per_slice[0], strict=True):
            if sample.shape != first.shape:
                raise ValueError(f"candidate {versions[m]} has {len(sample)} items on {name}, candidate "
                                 f"{versions[0]} {len(first)}: candidates must be scored on the same items")
    rng = np.random.default_rng(seed)
    items = sum(len(sample) for sample in per_slice[0])
    candidates = []
    for m, samples in enumerate(per_slice):
        low, high = interval(samples, confidence, resamples, rng)
        score = float(np.mean([sample.mean() for sample in samples]))
        candidates.append(Candidate(m, str(versions[m]), score, low, high, items))
    named = [_named(c.version) for c in candidates]
    ranked = sorted(range(len(candidates)), key=lambda m: (-candidates[m].score, m))
    winner = candidates[ranked[0]]
    spread = max(c.score for c in candidates) - min(c.score for c in candidates)
    if len(candidates) == 1:  # with one candidate the eval is not split (the module's docstring)
        reason = f"{named[0]} is the only candidate ({winner.score:.3f} on {items} items): nothing to choose."
        return Selection(winner.index, candidates, spread, None, None, None, reason)
    second = candidates[ranked[1]]
    gap = winner.score - second.score
    gap_low, gap_high = interval([w - s for w, s in zip(per_slice[winner.index], per_slice[second.index],
                                                         strict=True)], confidence, resamples, rng)
    reason = (f"{named[winner.index]} won the selection among {len(candidates)} candidates: {winner.score:.3f} on "
              f"{items} counted items, ahead of {named[second.index]}'s {second.score:.3f} (gap {gap:+.3f}, "
              f"{confidence:.0%} interval {gap_low:+.3f} to {gap_high:+.3f}); spread {spread:.3f}.")
    return Selection(winner.index, candidates, spread, gap, gap_low, gap_high, reason)


def _named(version: str) -> str:
    """A registry version as people read it in the UI: "14" is v14; a name given whole stays as it is."""
    return f"v{version}" if version.isdigit() else version
