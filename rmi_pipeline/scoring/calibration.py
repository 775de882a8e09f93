"""How far a judge's verdicts can be trusted: its agreement with people who rated the same answers (true and false
positive rates, Cohen's kappa, per slice), the pass rate it reports corrected for the errors it was measured to make,
with an interval, and the verdict that blocks promotion when it agrees with people too seldom.

People's thumbs are the reference: a thumbs-up is a pass, a thumbs-down a fail. numpy only, no Dagster import.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

ALL = "all"  # the key of every rated answer together, beside the slices


@dataclass(frozen=True)
class Agreement:
    """The judge against people on the answers both rated. A rate is None where nothing measures it (no answer
    people passed for `tpr`, none they failed for `fpr`, none at all for `agreement`), and `kappa` is None where
    both gave every answer one and the same verdict (chance agreement is then total: 0/0)."""

    n: int
    positives: int  # answers people passed
    negatives: int  # answers people failed
    judge_passes: int
    true_positives: int  # the judge passed what people passed
    false_positives: int  # the judge passed what people failed
    tpr: float | None
    fpr: float | None
    agreement: float | None
    kappa: float | None
    sentence: str

    @property
    def tpr_counts(self) -> tuple[int, int]:
        """(answers people passed that the judge passed, answers people passed): what `corrected_pass_rate` takes."""
        return self.true_positives, self.positives

    @property
    def fpr_counts(self) -> tuple[int, int]:
        """(answers people failed that the judge passed, answers people failed)."""
        return self.false_positives, self.negatives

    def as_dict(self) -> dict:
        return asdict(self)


def agreement(judge: Sequence[bool], people: Sequence[bool],
              slices: Sequence[str] | None = None) -> dict[str, Agreement]:
    """The judge's agreement with people over every rated answer ("all") and per slice, `judge[i]` and `people[i]`
    being the two verdicts (True: pass) on one answer and `slices[i]` its slice."""
    judged, rated = np.asarray(judge, dtype=bool).ravel(), np.asarray(people, dtype=bool).ravel()
    if len(judged) != len(rated) or (slices is not None and len(slices) != len(rated)):
        raise ValueError(f"the judge's verdicts ({len(judged)}), people's ({len(rated)}) and the slices "
                         f"({'none' if slices is None else len(slices)}) must be as many, one per rated answer")
    result = {ALL: _agreement(judged, rated)}
    if slices is not None:
        names = np.asarray(slices, dtype=object)
        if ALL in set(names):
            raise ValueError(f"a slice may not be named {ALL!r}: that name holds every rated answer together")
        for name in sorted(set(names)):
            keep = names == name
            result[name] = _agreement(judged[keep], rated[keep])
    return result


def _agreement(judged: np.ndarray, rated: np.ndarray) -> Agreement:
    n, positives = len(rated), int(rated.sum())
    negatives, judge_passes = n - positives, int(judged.sum())
    tp, fp = int((judged & rated).sum()), int((judged & ~rated).sum())
    agree = tp + (negatives - fp)
    tpr = tp / positives if positives else None
    fpr = fp / negatives if negatives else None
    # chance agreement in whole numbers, so that "total" is tested exactly: pe = chance / n^2
    chance = judge_passes * positives + (n - judge_passes) * negatives
    kappa = (agree * n - chance) / (n * n - chance) if n * n != chance else None
    if not n:
        sentence = "No answer here was rated by people, so the judge's agreement with them is not measured."
    else:
        passed = (f"it passes {tpr:.0%} of what people pass" if positives else
                  "people passed none, so how often it passes a good answer is not measured")
        failed = (f"{fpr:.0%} of what they fail" if negatives else
                  "people failed none, so how often it passes a bad answer is not measured")
        sentence = (f"On {n} answers people rated ({positives} up, {negatives} down), the judge agrees with them on "
                    f"{agree / n:.0%} ({_kappa_text(kappa)}): {passed}, and {failed}.")
    return Agreement(n, positives, negatives, judge_passes, tp, fp, tpr, fpr, agree / n if n else None, kappa,
                     sentence)


def _kappa_text(kappa: float | None) -> str:
    if kappa is None:
        return "kappa undefined: both gave every answer the same verdict"
    return f"kappa {kappa:.2f}"


@dataclass(frozen=True)
class JudgeVerdict:
    """Whether the judge may gate promotion. "unmeasured" (too few rated answers) does not block by itself: a team
    with no ratings yet still gets its loop, told the judge is unchecked."""

    status: Literal["trusted", "unmeasured", "blocked"]
    blocks: bool
    sentence: str


def judge_verdict(agreement: Agreement, min_agreement: float, min_labels: int) -> JudgeVerdict:
    """The judge blocks promotion when it agrees with people on less than `min_agreement` of at least `min_labels`
    rated answers; with fewer, its agreement is not measured yet and it neither blocks nor vouches."""
    n, share = agreement.n, agreement.agreement
    if n < min_labels or share is None:
        return JudgeVerdict("unmeasured", False, (
            f"Only {n} answers were rated by both people and the judge, fewer than RMI_JUDGE_MIN_LABELS "
            f"{min_labels}: the judge's agreement is not measured yet, so it neither blocks nor vouches for "
            f"promotion."))
    # one decimal where whole percents would print a share beside the floor as the floor itself
    shown = f"{share:.0%}" if f"{share:.0%}" != f"{min_agreement:.0%}" else f"{share:.1%}"
    measured = f"The judge agrees with people on {shown} of {n} rated answers ({_kappa_text(agreement.kappa)})"
    if share < min_agreement:
        return JudgeVerdict("blocked", True, (
            f"{measured}, below RMI_JUDGE_MIN_AGREEMENT {min_agreement:.2f}: promotion is blocked until the judge "
            f"or its rubric is fixed."))
    return JudgeVerdict("trusted", False, f"{measured}, at or above RMI_JUDGE_MIN_AGREEMENT {min_agreement:.2f}: "
                                          f"its verdicts may gate promotion.")


@dataclass(frozen=True)
class Corrected:
    """The true pass rate estimated from the judge's, corrected for its measured errors. `informative` is False
    where the judge's errors are not measured or it is no better than chance: then no estimate, and the interval is
    all of [0, 1]."""

    estimate: float | None
    low: float
    high: float
    informative: bool
    judged_rate: float | None
    tpr: float | None
    fpr: float | None
    confidence: float
    sentence: str

    def as_dict(self) -> dict:
        return asdict(self)


def corrected_pass_rate(judged_passes: int, judged_items: int, tpr_counts: tuple[int, int],
                        fpr_counts: tuple[int, int], confidence: float = 0.95) -> Corrected:
    """The Rogan-Gladen estimate (judged rate - fpr) / (tpr - fpr), clipped to [0, 1], with a delta-method interval
    over the three measured rates, each shrunk by z^2/2 passes and fails (Agresti-Coull): the plain Wald interval and
    a parametric bootstrap fell to 91% and 88% coverage at 95% with 60 rated answers, this one held 95-99.6% in every
    setting tried. `tpr_counts`: (judge passes, count) on answers people passed; `fpr_counts`: on those they failed."""
    (tp, positives), (fp, negatives) = tpr_counts, fpr_counts
    for name, hits, total in [("judged_passes", judged_passes, judged_items), ("tpr_counts", tp, positives),
                              ("fpr_counts", fp, negatives)]:
        if not 0 <= hits <= total:
            raise ValueError(f"{name}: {hits} passes of {total} items is not a count of passes")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} is not between 0 and 1")
    judged = judged_passes / judged_items if judged_items else None
    tpr, fpr = (tp / positives if positives else None), (fp / negatives if negatives else None)

    def uncorrected(why: str) -> Corrected:
        return Corrected(None, 0.0, 1.0, False, judged, tpr, fpr, confidence, why)

    if judged is None:
        return uncorrected("No item was judged, so there is no pass rate to correct.")
    if tpr is None or fpr is None:
        missing = "rated no answer" if tpr is None and fpr is None else f"{'passed' if tpr is None else 'failed'} none"
        return uncorrected(f"The judge passes {judged:.0%} of the items, but people {missing} of the answers the "
                           f"judge also graded: its errors are not measured, so its pass rate is not corrected "
                           f"(interval 0 to 1).")
    z = NormalDist().inv_cdf((1 + confidence) / 2)

    def shrunk(hits: int, total: int) -> tuple[float, float]:  # (the adjusted rate, its variance)
        rate = (hits + z * z / 2) / (total + z * z)
        return rate, rate * (1 - rate) / (total + z * z)

    p, var_p = shrunk(judged_passes, judged_items)
    se, var_se = shrunk(tp, positives)
    fa, var_fa = shrunk(fp, negatives)
    youden = se - fa
    # a ratio whose denominator is not surely above zero has no bounded interval (Fieller): say so instead
    if tpr - fpr <= 0 or youden - z * math.sqrt(var_se + var_fa) <= 0:
        return uncorrected(f"The judge passes {tpr:.0%} of what people pass and {fpr:.0%} of what they fail: no "
                           f"better than chance on {positives + negatives} rated answers, so its pass rate of "
                           f"{judged:.2f} says nothing of the true one (interval 0 to 1).")
    estimate = min(max((judged - fpr) / (tpr - fpr), 0.0), 1.0)
    centre = (p - fa) / youden
    spread = z * math.sqrt(var_p + centre ** 2 * var_se + (1 - centre) ** 2 * var_fa) / youden
    low, high = min(max(centre - spread, 0.0), estimate), max(min(centre + spread, 1.0), estimate)
    return Corrected(estimate, low, high, True, judged, tpr, fpr, confidence, (
        f"Corrected for the judge's errors (it passes {tpr:.0%} of what people pass and {fpr:.0%} of what they "
        f"fail), the pass rate is {estimate:.2f} ({confidence:.0%} interval {low:.2f} to {high:.2f}); the judge "
        f"alone says {judged:.2f}."))
