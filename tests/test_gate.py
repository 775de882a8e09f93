"""The promotion gate on fixed score tables: what gets promoted and why."""

import pytest

from rmi_pipeline.ml.gate import decide

PRIVATE = {("add", 2), ("add", 3), ("sub", 2), ("sub", 3)}
KW = {"min_gain": 0.0, "slice_tolerance": 0.10, "first_floor": 0.05}


def scores(a2, a3, s2, s3, public=1.0):
    return {("add", 1): public, ("add", 2): a2, ("add", 3): a3, ("sub", 2): s2, ("sub", 3): s3}


def test_better_everywhere_is_promoted():
    d = decide(scores(0.9, 0.6, 0.9, 0.5), scores(0.8, 0.4, 0.8, 0.4), PRIVATE, **KW)
    assert d.promote and d.gain == pytest.approx(0.125)


def test_one_slice_falling_past_the_tolerance_blocks_promotion():
    d = decide(scores(1.0, 1.0, 1.0, 0.2), scores(0.5, 0.5, 0.5, 0.5), PRIVATE, **KW)
    assert not d.promote and d.worst_slice == "sub/3" and "past the tolerance" in d.reason


def test_equal_or_worse_overall_is_not_promoted():
    assert not decide(scores(0.5, 0.5, 0.5, 0.5), scores(0.5, 0.5, 0.5, 0.5), PRIVATE, **KW).promote
    assert not decide(scores(0.4, 0.5, 0.5, 0.5), scores(0.5, 0.5, 0.5, 0.5), PRIVATE, **KW).promote


def test_public_slices_do_not_count():
    d = decide(scores(0.5, 0.5, 0.5, 0.5, public=0.0), scores(0.4, 0.4, 0.4, 0.4, public=1.0), PRIVATE, **KW)
    assert d.promote and d.challenger_mean == pytest.approx(0.5)


def test_first_model_needs_the_floor():
    assert decide(scores(0.3, 0, 0, 0), None, PRIVATE, **KW).promote
    first = decide(scores(0.01, 0, 0, 0), None, PRIVATE, **KW)
    assert not first.promote and "below the floor" in first.reason


def test_no_private_slice_is_an_error():
    with pytest.raises(ValueError, match="no private slice"):
        decide(scores(1, 1, 1, 1), None, set(), **KW)
