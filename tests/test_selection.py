"""Choosing one of K challengers (issue 57) without promoting luck, by either rule: the best on every item, gated on
every item at the level divided by K (corrected); or the best on the selection part, gated on the confirmation part
(split). Either way the best of K equal candidates is promoted no more often than one, and a truly better one still
is."""

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest

from rmi_pipeline.ml.gate import Paired, decide
from rmi_pipeline.ml.selection import corrected, in_selection, select
from rmi_pipeline.settings import Gate

SLICES = [f"{skill}/{tier}" for skill in ("add", "sub") for tier in range(2, 9)]


def test_the_split_is_the_same_whatever_the_order_items_come_in():
    strata = [f"add/{i % 3}" for i in range(90)]
    keys = [f"q{i}" for i in range(90)]
    mask = in_selection(strata, keys, 0.5, "suite 7")
    assert np.array_equal(mask, in_selection(strata, keys, 0.5, "suite 7"))
    order = np.random.default_rng(0).permutation(90)
    shuffled = in_selection([strata[i] for i in order], [keys[i] for i in order], 0.5, "suite 7")
    assert np.array_equal(shuffled, mask[order])


@pytest.mark.parametrize("share", [0.5, 0.2, 0.9])
def test_every_slice_of_two_items_or_more_is_split_both_ways_at_the_share(share):
    sizes = {"one": 1, "two": 2, "three": 3, "five": 5, "ten": 10, "many": 101}
    strata = [name for name, n in sizes.items() for _ in range(n)]
    keys = [f"{name}#{i}" for name, n in sizes.items() for i in range(n)]
    mask = in_selection(strata, keys, share, "salt")
    for name, n in sizes.items():
        chosen = int(mask[[s == name for s in strata]].sum())
        if n == 1:
            assert chosen == 0  # a lone item goes to the gate's part
        else:
            assert 1 <= chosen <= n - 1
            assert abs(chosen - share * n) <= 0.5 or chosen in (1, n - 1)  # within rounding, or kept off empty


def test_another_salt_splits_the_items_another_way():
    strata, keys = ["add/5"] * 200, [f"q{i}" for i in range(200)]
    a, b = in_selection(strata, keys, 0.5, "a"), in_selection(strata, keys, 0.5, "b")
    assert a.sum() == b.sum() == 100 and 60 <= (a != b).sum() <= 140  # independent halves differ on about half


@pytest.mark.parametrize("share", [0.0, 1.0, 1.5, -0.1])
def test_a_share_outside_0_to_1_is_an_error(share):
    with pytest.raises(ValueError, match="between 0 and 1"):
        in_selection(["add/5"], ["q"], share, "salt")


def exactly(score: float, n: int = 100, offset: int = 0) -> np.ndarray:
    right = round(score * n)
    return np.roll(np.array([1.0] * right + [0.0] * (n - right)), offset)


def test_the_truly_best_of_clearly_different_candidates_wins_and_the_reason_names_it():
    scores = [{s: exactly(p, offset=i) for i, s in enumerate(SLICES)} for p in (0.5, 0.8, 0.6)]
    chosen = select(scores, ["v14", "v15", "v16"], set(SLICES), 0.98, 500)
    assert chosen.winner == 1 and [c.score for c in chosen.candidates] == pytest.approx([0.5, 0.8, 0.6])
    assert chosen.spread == pytest.approx(0.3) and chosen.runner_up_gap == pytest.approx(0.2)
    assert 0.1 < chosen.gap_low < 0.2 < chosen.gap_high and chosen.candidates[1].low < 0.8 < chosen.candidates[1].high
    assert chosen.reason.startswith("v15 won the selection among 3 candidates: 0.800 on 1400 counted items, ahead "
                                    "of v16's 0.600 (gap +0.200, 98% interval +0.1")
    assert chosen.reason.endswith("); spread 0.300.")  # it says how clear the choice was, not what the gate judges
    assert chosen.as_dict()["candidates"][1]["version"] == "v15"
    numbered = select(scores, ["14", "15", "16"], set(SLICES), 0.98, 200)  # the registry's numbers, read as v15
    assert numbered.reason.startswith("v15 won the selection") and "ahead of v16's" in numbered.reason
    assert numbered.reason.endswith("spread 0.300.")


def test_a_tie_goes_to_the_lowest_index_and_slices_not_counted_do_not_choose():
    same = {s: exactly(0.7) for s in SLICES}
    assert select([same, same, same], ["a", "b", "c"], set(SLICES), 0.98, 200).winner == 0
    assert select([{s: exactly(0.5) for s in SLICES}, same, same], ["a", "b", "c"], set(SLICES), 0.98, 200).winner == 1
    mined = [{**same, "mined/add": exactly(0.9)}, {**same, "mined/add": exactly(0.1)}]
    chosen = select(mined, ["a", "b"], set(SLICES), 0.98, 200)
    assert chosen.winner == 0 and chosen.runner_up_gap == 0 and chosen.spread == 0


def test_one_candidate_has_nothing_to_choose():
    chosen = select([{s: exactly(0.7) for s in SLICES}], ["v3"], set(SLICES), 0.98, 200)
    assert chosen.winner == 0 and chosen.runner_up_gap is chosen.gap_low is chosen.gap_high is None
    assert chosen.reason == "v3 is the only candidate (0.700 on 1400 items): nothing to choose."


def test_no_candidate_or_no_counted_slice_is_an_error():
    with pytest.raises(ValueError, match="no candidate"):
        select([], [], set(SLICES), 0.98, 200)
    with pytest.raises(ValueError, match="no counted slice"):
        select([{"mined/add": exactly(0.5)}], ["v1"], set(SLICES), 0.98, 200)


def test_the_gate_for_the_best_of_k_has_its_one_sided_level_divided_by_k():
    gate = Gate(confidence=0.98, resamples=2000, min_gain=0.01)
    assert corrected(gate, 1) == gate  # one candidate: nothing chosen, nothing to correct
    four = corrected(gate, 4)
    assert four.confidence == pytest.approx(0.995)  # 1% a side, a quarter of it: 99.5% intervals
    assert (four.resamples, four.min_gain, four.slice_tolerance) == (2000, 0.01, gate.slice_tolerance)
    assert gate.confidence == 0.98  # the settings' own gate is left as it was
    assert corrected(TRIAL_GATE, 8).confidence == pytest.approx(0.975)  # the trials' below: 10% a side, 1.25% for 8


# Seeded trials: per trial, each slice's items have their own difficulty (a logit drawn around the slice's), every
# model answers each item at the probability that difficulty gives it, with its own noise: models agree on the easy
# and the hard items as real ones do (two models' answers correlate about 0.6 exact, 0.85 graded). Exact: 0/1 draws;
# graded: a Beta draw with that mean (a judge's share of criteria). 14 slices x 120 items: at the trials' gate (80%)
# a candidate 5 points better among 2, 4 or 8 is the one promoted in 98-99% of 0/1 trials under the corrected rule,
# 94-97% under the split (on the confirmation half, 840 items), and in every graded trial.
ITEMS, SPREAD, BETTER_BY = 120, 3.5, 0.05
CONCENTRATION = 3.0  # a graded score's Beta(c p, c (1-p)): its noise around the item's chance p
STRATA = [s for s in SLICES for _ in range(ITEMS)]
KEYS = [f"{s}#{i}" for s in SLICES for i in range(ITEMS)]
SELECT_RESAMPLES = 10  # the winner never rests on select's intervals: fewer resamples keep trials cheap


def _shift(ease: np.ndarray) -> np.ndarray:
    """Per slice, the logit step that raises the expected mean of its items by exactly BETTER_BY (bisection)."""
    expected = 1 / (1 + np.exp(-ease))
    low, high = np.zeros(len(ease)), np.full(len(ease), 8.0)
    for _ in range(40):
        mid = (low + high) / 2
        short = (1 / (1 + np.exp(-(ease + mid[:, None])))).mean(axis=1) - expected.mean(axis=1) < BETTER_BY
        low, high = np.where(short, mid, low), np.where(short, high, mid)
    return (low + high) / 2


def draw(kind: str, k: int, better_at: int | None, rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray]]:
    """(the champion's scores, each candidate's), each slices x items; the candidate at `better_at` 5 points better
    in expected mean on every slice, the others of the champion's skill."""
    ease = rng.normal(rng.uniform(-0.5, 1.5, (len(SLICES), 1)), SPREAD, (len(SLICES), ITEMS))
    chance = 1 / (1 + np.exp(-ease))
    better = chance if better_at is None else 1 / (1 + np.exp(-(ease + _shift(ease)[:, None])))

    def answers(p: np.ndarray) -> np.ndarray:
        if kind == "exact":
            return (rng.random(p.shape) < p).astype(float)
        return rng.beta(CONCENTRATION * p, CONCENTRATION * (1 - p)).round(3)

    return answers(chance), [answers(better if m == better_at else chance) for m in range(k)]


RULES, KINDS = ["corrected", "split"], ["exact", "graded"]


@dataclass
class Trial:
    promoted: bool  # the rule's verdict on its winner (one candidate: the gate on every item, under either rule)
    better_promoted: bool  # the truly better candidate was chosen and promoted
    naive_promoted: bool | None  # the best of K on every item, gated at the gate's own level on the same items


def trial(kind: str, k: int, seed: int, gate: Gate, rule: str = "corrected", *, better: bool = False,
          naive: bool = False, share: float = 0.5) -> Trial:
    """One cycle with `k` candidates (all of the champion's skill, or one at a random index 5 points better), the
    winner chosen and gated by `rule`, as a cycle does: corrected, the best on every item gated on every item at
    `corrected(gate, k)`; split, the best on the selection part gated on the confirmation part at the gate's own
    level. The draws do not depend on the rule: both judge the same candidates."""
    rng = np.random.default_rng([seed, k, kind == "exact", better])
    better_at = int(rng.integers(k)) if better else None
    champion, candidates = draw(kind, k, better_at, rng)
    versions = [f"v{m}" for m in range(k)]

    def best(keep: np.ndarray) -> int:
        return select([{s: c[j][keep[j]] for j, s in enumerate(SLICES)} for c in candidates], versions, set(SLICES),
                      gate.confidence, SELECT_RESAMPLES, seed=seed).winner

    def gated(winner: int, keep: np.ndarray, level: Gate) -> bool:
        return decide({s: Paired(candidates[winner][j][keep[j]], champion[j][keep[j]]) for j, s in enumerate(SLICES)},
                      set(SLICES), level, seed=seed).promote

    every = np.ones((len(SLICES), ITEMS), dtype=bool)
    if k == 1:  # nothing to choose: the gate judges the one candidate on every item at its own level
        promoted = gated(0, every, gate)
        return Trial(promoted, promoted and better_at == 0, promoted if naive else None)
    if rule == "split":
        chosen = in_selection(STRATA, KEYS, share, f"trial {seed}").reshape(len(SLICES), ITEMS)
        winner = best(chosen)
        promoted = gated(winner, ~chosen, gate)
        naive_winner = best(every) if naive else None
    elif rule == "corrected":
        winner = naive_winner = best(every)  # the naive rule chooses as this one does, and gates at the level of one
        promoted = gated(winner, every, corrected(gate, k))
    else:
        raise ValueError(f"no rule {rule!r}: {' or '.join(RULES)}")
    return Trial(promoted, promoted and winner == better_at, gated(naive_winner, every, gate) if naive else None)


# a 10% one-sided level shows optimism in few trials; at K = 8 the corrected 1.25% still has 2.5 resamples in its tail
TRIAL_GATE = Gate.model_construct(confidence=0.8, resamples=200)
TRIALS, BETTER_TRIALS = 240, 100  # about 35 s of trials in all, on one core


@cache
def trials(kind: str, rule: str, k: int, better: bool) -> list[Trial]:
    """One rule's seeded trials at one K, run once for this file's tests: at K = 1 the rules are the same, and the
    naive verdicts come with the corrected rule's at K = 8 (the same winner, gated once more)."""
    if k == 1 and rule != RULES[0]:
        return trials(kind, RULES[0], k, better)
    naive = rule == "corrected" and k == 8 and not better
    return [trial(kind, k, t, TRIAL_GATE, rule, better=better, naive=naive)
            for t in range(BETTER_TRIALS if better else TRIALS)]


def promoted(kind: str, rule: str, k: int) -> float:
    """The share of equal-candidate trials whose winner the rule promoted."""
    return sum(t.promoted for t in trials(kind, rule, k, False)) / TRIALS


def allowance(one: float) -> float:
    """How far above one candidate's rate an honest rule's may land by chance: two shares of TRIALS independent
    trials at a true rate p differ by a standard deviation sqrt(2 p (1-p) / TRIALS), 0.027 at p = 0.1 (the gate's
    one-sided level, about the rate one candidate shows); 3 of them, so an honest rule exceeds the bound in 0.13% of
    seeds per comparison, under 2% over this file's twelve."""
    p = max((1 - TRIAL_GATE.confidence) / 2, one)
    return 3 * math.sqrt(2 * p * (1 - p) / TRIALS)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rule", RULES)
def test_the_best_of_k_equal_candidates_is_promoted_no_more_often_than_one(rule, kind):
    """Of 2, 4 or 8 candidates of the champion's skill, the one chosen is promoted no more often than a lone one,
    whichever rule chose and gated it."""
    one = promoted(kind, rule, 1)
    rates = {k: promoted(kind, rule, k) for k in (2, 4, 8)}
    assert all(rate <= one + allowance(one) for rate in rates.values()), (rates, one, allowance(one))


@pytest.mark.parametrize("kind", KINDS)
def test_the_best_of_8_gated_on_the_items_that_chose_it_at_the_level_of_one_is_promoted_far_more_often(kind):
    """The naive rule breaks the bound the honest rules keep (0.36 of 0/1 trials promoted, 0.27 of graded ones, where
    one candidate is in 0.09 and 0.11), so those trials can see optimism: a rule that let it through would fail them."""
    one = promoted(kind, "corrected", 1)
    naive = sum(bool(t.naive_promoted) for t in trials(kind, "corrected", 8, False)) / TRIALS
    assert naive > one + allowance(one), (naive, one, allowance(one))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rule", RULES)
def test_a_candidate_5_points_better_is_the_one_promoted(rule, kind):
    """Among K of the champion's skill, the one 5 points better is chosen and passes the gate in 9 trials of 10:
    corrected, on every item at the level divided by K; split, on the confirmation half alone."""
    for k in (1, 2, 4, 8):
        kept = sum(t.better_promoted for t in trials(kind, rule, k, True))
        assert kept >= 0.9 * BETTER_TRIALS, (k, kept)
