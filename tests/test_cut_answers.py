"""A thumb on an answer that the client's max_tokens or stop text cut (meta.cut, which rmi serve writes) rates a text
the model did not choose to end: the loop counts it nowhere (training rows, KTO's rated rows, the reward model's,
practice's failed prompts, the champion's health, a canary's verdict, the live probe); a correction on it still
teaches."""

import json
from datetime import UTC, datetime, timedelta

import polars as pl

from rmi_pipeline.assets.canary import live_periods
from rmi_pipeline.assets.dataset import _RATED, _feedback_rows
from rmi_pipeline.assets.health import MIN_RATED, live_rates
from rmi_pipeline.assets.practice import FAILED
from rmi_pipeline.assets.probes import live
from rmi_pipeline.assets.reward import _RATED as REWARD_RATED
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources
from rmi_pipeline.schema import EVENT_COLUMNS
from rmi_pipeline.settings import DEFAULT_MIX
from rmi_pipeline.settings.evals import Probes

START = datetime(2026, 12, 1, tzinfo=UTC)


def events(version: str, rating: str, cut: bool, n: int, first: int, correction: str | None = None) -> list[dict]:
    """`n` rated answers of `version` on one slice (add, 3 digits), cut or whole."""
    meta = {"response_id": "r", "arm": "champion", **({"cut": True} if cut else {})}
    return [{"event_id": f"e{first + i}", "schema_version": 1, "ts": START + timedelta(seconds=first + i),
             "user_id": "u", "model_version": version, "prompt": f"{100 + first + i}+111=", "completion": "2",
             "rating": rating, "correction": correction, "comment": None, "source": "user", "skill": "add",
             "meta": json.dumps(meta), "batch_id": "b1", "tier": 3} for i in range(n)]


def test_thumbs_on_cut_answers_count_nowhere_and_their_corrections_do(rmi_env):
    warehouse = build_resources(rmi_env)["warehouse"]
    rows = (events("1", "up", False, MIN_RATED, 0) + events("1", "down", True, MIN_RATED, 100)  # champion
            + events("2", "up", True, MIN_RATED, 200) + events("2", "down", False, MIN_RATED, 300)  # canary
            + events("1", "down", True, 1, 400, correction="211"))
    frame = pl.DataFrame(rows, infer_schema_length=None).select(list(EVENT_COLUMNS))
    assert warehouse.ingest(frame)[0] == len(rows)

    training = warehouse.query(_feedback_rows({**DEFAULT_MIX, "thumbs_down": 0.2}))
    assert sorted(training.group_by("source").len().rows()) == [("correction", 1), ("thumbs_down", MIN_RATED),
                                                               ("thumbs_up", MIN_RATED)]
    assert set(training.filter(pl.col("source") != "correction")["prompt"]) == {
        r["prompt"] for r in rows if "cut" not in r["meta"]}
    for rated in (warehouse.query(_RATED), warehouse.query(REWARD_RATED, [1000])):
        assert len(rated) == 2 * MIN_RATED  # the whole answers' thumbs: champion up, canary down
    assert warehouse.query(FAILED, ["1", 1000]).is_empty()  # its only thumbs-downs were on cut answers

    # health: the champion's whole answers were all liked, the canary's all disliked
    assert live_rates(warehouse, "1", 1000)[:2] == ({"add/3": 0.0}, 0.0)
    assert live_rates(warehouse, "2", 1000)[:2] == ({"add/3": 1.0}, 1.0)
    # the live probe audits liked answers: the canary's were all cut (and wrong), so it has none to audit
    assert live(ArithmeticRecipe(), warehouse, "2", "1", Probes()).counts == {"v1_liked": MIN_RATED,
                                                                              "v1_liked_wrong": MIN_RATED}
    [period] = live_periods(warehouse, "2", "1", START)["add/3"]
    assert (period.canary_rated, period.canary_down, period.champion_rated, period.champion_down) == (
        MIN_RATED, MIN_RATED, MIN_RATED, 0)
