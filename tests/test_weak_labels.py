"""Implicit signals as weak labels: an unrated answer a user copied trains like a thumbs-up, one they asked again like
a thumbs-down, each under its own share of RMI_MIX, only in the cycle after it came, and only where it has a share.
"""

import duckdb
import polars as pl
import pytest

from rmi_pipeline.assets.dataset import _feedback_rows
from rmi_pipeline.ml import dataset
from rmi_pipeline.ml.mix import KTO_MIX
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.settings import DEFAULT_MIX

RECIPE = ArithmeticRecipe()
EVALS = {"hashes": [], "leak_marker": "rmi-leak-marker-x", "mined_share": 0.0}
WEAK = {**DEFAULT_MIX, "copied": 0.1, "asked_again": 0.05}


def _warehouse():
    """Feedback of two batches: b1's copied, asked-again and thumbs-up answers (and one rated up that also carries a
    signal), then b2's one copied answer."""
    db = duckdb.connect()
    db.sql("CREATE TABLE feedback_events (prompt VARCHAR, completion VARCHAR, rating VARCHAR, correction VARCHAR, "
           "batch_id VARCHAR, meta JSON)")
    db.sql("""INSERT INTO feedback_events VALUES
        ('12+30=', '42', NULL, NULL, 'b1', '{"signal": "copied", "client": "web"}'),
        ('20+25=', '46', NULL, NULL, 'b1', '{"signal": "asked_again", "again": "r9"}'),
        ('11+11=', '22', 'up', NULL, 'b1', NULL),
        ('13+13=', '26', 'up', NULL, 'b1', '{"signal": "asked_again"}'),
        ('40+40=', '81', NULL, NULL, 'b1', '{"client": "ios"}'),
        ('31+31=', '62', NULL, NULL, 'b2', '{"signal": "copied"}')""")
    return db


def _built(db, shares: dict[str, float], trained: set[str], tmp_path):
    out = tmp_path / f"train-{len(trained)}-{shares['copied']}.parquet"
    built = dataset.build(iter([db.sql(_feedback_rows(shares)).pl()]), RECIPE, EVALS, trained, shares, out)
    return built, pl.read_parquet(out)


def test_copied_and_asked_again_answers_are_rows_of_their_own_sources_weighed_by_their_own_shares(tmp_path):
    built, rows = _built(_warehouse(), WEAK, set(), tmp_path)
    by_mix = {m: sorted(rows.filter(pl.col("mix") == m).select("prompt", "target").rows())
              for m in ("copied", "asked_again", "feedback")}
    assert by_mix["copied"] == [("12+30=", "42"), ("31+31=", "62")]  # the answer the user took for right: a target
    assert by_mix["asked_again"] == [("20+25=", "46")]
    assert by_mix["feedback"] == [("11+11=", "22"), ("13+13=", "26")]  # rated up: its rating wins over its signal
    assert KTO_MIX["copied"] and not KTO_MIX["asked_again"]  # KTO's desirable and undesirable rows
    present = WEAK["feedback"] + WEAK["copied"] + WEAK["asked_again"]
    weighted = rows.with_columns(weight=pl.col("mix").replace_strict(built.weights))
    assert dict(weighted.group_by("mix").agg(pl.col("weight").sum()).rows()) == {
        m: pytest.approx(WEAK[m] / present) for m in ("feedback", "copied", "asked_again")}


def test_without_a_share_implicit_signals_are_not_even_read(tmp_path):
    db = _warehouse()
    assert DEFAULT_MIX["copied"] == DEFAULT_MIX["asked_again"] == 0  # off until a bench chooses
    assert set(db.sql(_feedback_rows(DEFAULT_MIX)).pl()["source"]) == {"thumbs_up"}
    assert set(db.sql(_feedback_rows({**DEFAULT_MIX, "copied": 0.1})).pl()["source"]) == {"thumbs_up", "copied"}
    built, _ = _built(db, DEFAULT_MIX, set(), tmp_path)
    assert "copied" not in built.by_source and "asked_again" not in built.by_source


def test_a_cycle_later_implicit_signals_are_not_replayed(tmp_path):
    """The champion learned b1: its thumbs-ups are replayed, its weak labels dropped; b2's copied answer is new."""
    built, rows = _built(_warehouse(), WEAK, {"b1"}, tmp_path)
    assert built.by_source == {"replay": 2, "copied": 1}
    assert rows.filter(pl.col("mix") == "copied")["prompt"].to_list() == ["31+31="]
    assert "20+25=" not in rows["prompt"].to_list()  # asked again in b1: learned once, then never again
