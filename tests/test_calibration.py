"""The judge is judged: its agreement with people, the pass rate corrected for its errors, and when it blocks."""

import numpy as np
import pytest

from rmi_pipeline.scoring.calibration import agreement, corrected_pass_rate, judge_verdict

# ten answers, hand-counted: 4 passed by both, 3 failed by both, 2 passed only by the judge, 1 only by people
JUDGE = [True, True, True, False, False, False, True, False, True, True]
PEOPLE = [True, True, False, False, False, True, True, False, True, False]


def test_rates_and_kappa_on_a_hand_counted_table_overall_and_per_slice():
    """tpr 4/5, fpr 2/5, agreement 7/10; chance agreement 0.6 x 0.5 + 0.4 x 0.5 = 0.5, so kappa (0.7 - 0.5) / 0.5."""
    by = agreement(JUDGE, PEOPLE, ["a"] * 5 + ["b"] * 5)
    assert list(by) == ["all", "a", "b"]
    every = by["all"]
    assert (every.n, every.positives, every.negatives, every.judge_passes) == (10, 5, 5, 6)
    assert every.tpr_counts == (4, 5) and every.fpr_counts == (2, 5)
    assert (every.tpr, every.fpr, every.agreement, every.kappa) == pytest.approx((0.8, 0.4, 0.7, 0.4))
    assert every.sentence == ("On 10 answers people rated (5 up, 5 down), the judge agrees with them on 70% (kappa "
                              "0.40): it passes 80% of what people pass, and 40% of what they fail.")
    # a: 2 both pass, 1 judge only, 2 both fail; chance 0.6 x 0.4 + 0.4 x 0.6 = 0.48
    assert (by["a"].tpr, by["a"].fpr, by["a"].agreement, by["a"].kappa) == pytest.approx((1, 1 / 3, 0.8, 0.32 / 0.52))
    # b: 2 both pass, 1 people only, 1 judge only, 1 both fail; chance 0.6 x 0.6 + 0.4 x 0.4 = 0.52
    assert (by["b"].tpr, by["b"].fpr, by["b"].agreement, by["b"].kappa) == pytest.approx((2 / 3, 0.5, 0.6, 0.08 / 0.48))


def test_degenerate_ratings_give_defined_values_and_say_what_is_not_measured():
    """No ratings, or people who passed every answer, give None where nothing measures a figure, never NaN."""
    none = agreement([], [])["all"]
    assert (none.n, none.tpr, none.fpr, none.agreement, none.kappa) == (0, None, None, None, None)
    assert none.sentence == "No answer here was rated by people, so the judge's agreement with them is not measured."
    all_pass = agreement([True] * 8 + [False] * 2, [True] * 10)["all"]
    assert (all_pass.tpr, all_pass.fpr, all_pass.agreement, all_pass.kappa) == (0.8, None, 0.8, 0.0)
    assert "people failed none, so how often it passes a bad answer is not measured" in all_pass.sentence
    same = agreement([True] * 10, [True] * 10)["all"]
    assert same.kappa is None and "kappa undefined: both gave every answer the same verdict" in same.sentence
    unmeasured = judge_verdict(none, 0.7, 30)
    assert (unmeasured.status, unmeasured.blocks) == ("unmeasured", False)
    assert unmeasured.sentence.startswith("Only 0 answers were rated by both people and the judge, fewer than "
                                          "RMI_JUDGE_MIN_LABELS 30: the judge's agreement is not measured yet")
    with pytest.raises(ValueError, match="must be as many"):
        agreement([True], [True, False])
    with pytest.raises(ValueError, match="may not be named 'all'"):
        agreement([True], [True], ["all"])


def rated(rng: np.random.Generator, n: int, pass_rate: float, tpr: float, fpr: float) -> tuple[np.ndarray, np.ndarray]:
    """People's verdicts on n answers, and a judge's that passes what people pass at `tpr`, what they fail at `fpr`."""
    people = rng.random(n) < pass_rate
    return np.where(people, rng.random(n) < tpr, rng.random(n) < fpr), people


def test_a_judge_agreeing_at_0_6_blocks_promotion_and_a_good_judge_does_not():
    rng = np.random.default_rng(0)
    people = rng.random(200) < 0.5
    judge = people.copy()
    judge[:80] = ~judge[:80]  # wrong on 80 of 200: agrees on exactly 60%
    verdict = judge_verdict(agreement(judge, people)["all"], min_agreement=0.7, min_labels=30)
    assert (verdict.status, verdict.blocks) == ("blocked", True)
    assert verdict.sentence.startswith("The judge agrees with people on 60% of 200 rated answers (kappa ")
    assert verdict.sentence.endswith("below RMI_JUDGE_MIN_AGREEMENT 0.70: promotion is blocked until the judge or its "
                                     "rubric is fixed.")
    good = judge_verdict(agreement(*rated(rng, 200, 0.6, 0.9, 0.1))["all"], min_agreement=0.7, min_labels=30)
    assert (good.status, good.blocks) == ("trusted", False) and "its verdicts may gate promotion" in good.sentence
    # a share just under the floor is not printed as the floor
    close = judge_verdict(agreement([True] * 139 + [False] * 61, [True] * 200)["all"], 0.7, 30)
    assert close.blocks and "on 69.5% of 200" in close.sentence


def test_the_corrected_pass_rate_is_rogan_gladen_s_clipped_and_its_interval_holds_it():
    """(0.6 - 0.2) / (0.8 - 0.2) = 2/3; a judged rate below the judge's false positive rate corrects to 0, not below."""
    c = corrected_pass_rate(60, 100, (80, 100), (20, 100))
    assert c.informative and c.estimate == pytest.approx(2 / 3) and c.low < c.estimate < c.high
    assert (c.judged_rate, c.tpr, c.fpr) == (0.6, 0.8, 0.2)
    assert c.sentence == (f"Corrected for the judge's errors (it passes 80% of what people pass and 20% of what they "
                          f"fail), the pass rate is 0.67 (95% interval {c.low:.2f} to {c.high:.2f}); the judge alone "
                          f"says 0.60.")
    floor = corrected_pass_rate(10, 100, (80, 100), (20, 100))
    assert floor.estimate == 0.0 and floor.low == 0.0 and 0 < floor.high < 0.2
    assert corrected_pass_rate(60, 100, (80, 100), (20, 100), confidence=0.99).low < c.low


def test_a_judge_no_better_than_chance_or_unmeasured_corrects_nothing():
    """Where tpr - fpr is not surely above zero the correction would divide by noise: no estimate, all of [0, 1]."""
    chance = corrected_pass_rate(50, 100, (52, 100), (48, 100))
    assert (chance.estimate, chance.low, chance.high, chance.informative) == (None, 0.0, 1.0, False)
    assert "no better than chance on 200 rated answers" in chance.sentence
    assert not corrected_pass_rate(50, 100, (40, 100), (60, 100)).informative  # worse than chance: no division by < 0
    unmeasured = corrected_pass_rate(50, 100, (40, 50), (0, 0))
    assert (unmeasured.estimate, unmeasured.low, unmeasured.high) == (None, 0.0, 1.0)
    assert "people failed none of the answers the judge also graded" in unmeasured.sentence
    assert "people rated no answer" in corrected_pass_rate(50, 100, (0, 0), (0, 0)).sentence
    assert corrected_pass_rate(0, 0, (40, 50), (5, 50)).sentence == "No item was judged, so there is no pass rate to " \
        "correct."
    with pytest.raises(ValueError, match="is not a count of passes"):
        corrected_pass_rate(101, 100, (40, 50), (5, 50))


def test_the_corrected_interval_covers_the_true_pass_rate_in_at_least_93_percent_of_400_trials():
    """A judge that passes 85% of good answers and 15% of bad ones grades 300 eval items of a true pass rate drawn
    in [0.2, 0.8]; people rated 300 other answers (their own pass rate drawn apart) for its calibration. The 95%
    interval covers the true rate in 382 of 400 seeded trials (95.5%; from 94.0% to 98.25% over 20 seeds), measured
    against the rate the items are drawn from, a harder target than the items' own share."""
    rng = np.random.default_rng(0)
    covered = informative = 0
    for _ in range(400):
        truth = rng.uniform(0.2, 0.8)
        judged, _ = rated(rng, 300, truth, 0.85, 0.15)
        calibration = agreement(*rated(rng, 300, rng.uniform(0.2, 0.8), 0.85, 0.15))["all"]
        c = corrected_pass_rate(int(judged.sum()), 300, calibration.tpr_counts, calibration.fpr_counts)
        covered += c.low <= truth <= c.high
        informative += c.informative
    print(f"corrected pass rate: 95% interval covered the true pass rate in {covered} of 400 trials "
          f"({covered / 400:.2%})")
    assert covered >= 0.93 * 400 and informative == 400
