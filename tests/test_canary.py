"""The canary's live verdict: a truly worse canary is aborted, an equal one is promoted, in seeded trials."""

import numpy as np

from rmi_pipeline.ml.canary import ABORT, PROMOTE, WAIT, Period, judge

RATES = {"add/3": 0.10, "add/6": 0.20, "sub/3": 0.15, "sub/6": 0.30}  # the champion's thumbs-down per slice
SHARE = 0.1  # of users on the canary


def world(rng, worse_by: float, canary_per_slice: int, canary_shares=None, periods: int = 10) -> dict:
    """Rated answers per slice and period: users drift to harder questions (every rate rises by 0.1 over the
    periods), the canary is `worse_by` thumbs-down points worse on add/6 only."""
    shares = canary_shares or [SHARE] * periods
    per_period = canary_per_slice / sum(shares)
    data = {}
    for name, base in RATES.items():
        data[name] = []
        for k, share in enumerate(shares):
            n1, n0 = round(per_period * share), round(per_period * (1 - share))
            p0 = base + 0.1 * k / periods
            p1 = p0 + (worse_by if name == "add/6" else 0.0)
            data[name].append(Period(n1, int(rng.binomial(n1, p1)), n0, int(rng.binomial(n0, p0))))
    return data


def verdict(data: dict, min_events: int = 0, timed_out: bool = False):
    return judge(data, confidence=0.98, tolerance=0.0, min_events=min_events, timed_out=timed_out,
                 canary_version="7", champion_version="6")


def test_a_canary_5_points_worse_on_one_slice_is_aborted_and_an_equal_one_is_not_in_seeded_trials():
    rng = np.random.default_rng(0)
    trials = 300
    aborted_worse = sum(verdict(world(rng, 0.05, 2000)).action == ABORT for _ in range(trials)) / trials
    aborted_equal = sum(verdict(world(rng, 0.0, 2000)).action == ABORT for _ in range(trials)) / trials
    assert aborted_worse >= 0.95 and aborted_equal <= 0.05, (aborted_worse, aborted_equal)
    worse = verdict(world(np.random.default_rng(1), 0.05, 2000))
    assert [s.name for s in worse.slices if s.worse] == ["add/6"]  # the slice users were worse off on, named
    assert worse.reason.startswith("Aborted: canary v7 is worse for users than champion v6 on add/6")


def test_a_canary_that_served_while_questions_got_harder_is_not_blamed_for_it():
    """Periods pair the arms: a canary that answered mostly late, when every rate was higher, is compared with
    the champion's answers of the same periods, not with its whole history."""
    late = [0.02] * 5 + [0.3] * 5
    rng = np.random.default_rng(2)
    data = [world(rng, 0.0, 2000, canary_shares=late) for _ in range(100)]
    assert sum(verdict(d).action == ABORT for d in data) / len(data) <= 0.05
    pooled = data[0]["sub/6"]  # the totals would have shown it worse
    canary = sum(p.canary_down for p in pooled) / sum(p.canary_rated for p in pooled)
    champion = sum(p.champion_down for p in pooled) / sum(p.champion_rated for p in pooled)
    assert canary - champion > 0.03


def test_a_canary_waits_for_its_rated_answers_and_a_timeout_decides_on_what_there_is():
    rng = np.random.default_rng(3)
    few = world(rng, 0.0, 300)
    waiting = verdict(few, min_events=8000)
    assert waiting.action == WAIT and waiting.reason.startswith("Waiting: 1,200 of 8,000 rated canary answers")
    timed_out = verdict(few, min_events=8000, timed_out=True)
    assert timed_out.action == PROMOTE and timed_out.timed_out and "Timed out with 1,200 of 8,000" in timed_out.reason
    blatant = world(rng, 0.4, 300)  # a canary far worse needs few answers to be caught, timeout or not
    assert verdict(blatant, min_events=8000).action == ABORT
    too_few = {"add/3": [Period(5, 5, 50, 0)]}  # under MIN_PER_ARM: shown, not judged
    assert not verdict(too_few).slices[0].judged and verdict(too_few).action == PROMOTE


def test_a_canary_answers_its_share_of_10000_users_within_2_points_and_each_canary_draws_other_users():
    from rmi_pipeline.serving.routing import in_canary

    users = [f"user-{i}" for i in range(10_000)]
    for share in (0.05, 0.1, 0.5):
        assert abs(sum(in_canary(u, "7", share) for u in users) / len(users) - share) <= 0.02, share
    seven = {u for u in users if in_canary(u, "7", 0.1)}
    eight = {u for u in users if in_canary(u, "8", 0.1)}
    assert len(seven & eight) / len(seven) < 0.2  # about a tenth of v7's users meet v8 too: no group bears them all
    assert not any(in_canary(u, "7", 0.0) for u in users) and all(in_canary(u, "7", 1.0) for u in users)
