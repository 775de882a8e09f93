"""The warehouse views a team queries: thumbs-down by model version, skill and tier per day, corrections,
failing prompts; tier filled at ingest from the recipe."""

import pytest
from dagster import instance_for_test
from feedback_intake import Intake, event

from rmi_pipeline.resources import build_resources

DAY1, DAY2 = "2026-11-28T09:00:00Z", "2026-11-29T09:00:00Z"
BATCH = [
    event(1, ts=DAY1, model_version="1", prompt="12+345=", rating="down", correction="357"),
    event(2, ts=DAY1, model_version="1", prompt="12+345=", rating="down"),
    event(3, ts=DAY1, model_version="1", prompt="100+200=", rating="up"),
    event(4, ts=DAY1, model_version="1", prompt="7-2=", skill=None, rating="up"),  # skill from the recipe
    event(5, ts="2026-11-29T10:00:00Z", model_version="2", prompt="12+345=", rating="up"),
    event(6, ts="2026-11-29T11:00:00Z", model_version="2", prompt="7-2=", skill="sub", rating="down",
          correction="5"),
    event(7, ts=DAY2, model_version="2", prompt="hello", skill="chat", rating="down"),  # not a recipe prompt
    event(8, ts="2026-11-29T23:30:00-05:00", model_version="2", prompt="100+200=", rating=None),  # 30 Nov in UTC
]


@pytest.fixture
def warehouse(rmi_env):
    resources = build_resources(rmi_env)
    with instance_for_test() as instance:
        intake = Intake(resources, instance)
        intake.land("views.jsonl", "\n".join(BATCH).encode())
        intake.tick()
        assert intake.ingest("views.jsonl")[0].success
        yield resources["warehouse"]


def test_thumbs_down_per_day_by_model_version_skill_and_tier(warehouse):
    daily = warehouse.query("SELECT day::VARCHAR AS day, model_version, skill, tier, events, thumbs_down, "
                            "round(thumbs_down_rate, 3) AS rate, corrections FROM feedback_daily")
    assert daily.rows() == [
        ("2026-11-28", "1", "add", 3, 3, 2, 0.667, 1),
        ("2026-11-28", "1", "sub", 1, 1, 0, 0.0, 0),
        ("2026-11-29", "2", "add", 3, 1, 0, 0.0, 0),
        ("2026-11-29", "2", "chat", None, 1, 1, 1.0, 0),
        ("2026-11-29", "2", "sub", 1, 1, 1, 1.0, 1),
        ("2026-11-30", "2", "add", 3, 1, 0, None, 0),  # no rating: counted, not in the rate
    ]


def test_failing_prompts_and_corrections(warehouse):
    failing = warehouse.query("SELECT prompt, skill, tier, thumbs_down, rated, corrections, latest_correction "
                              "FROM failing_prompts")
    assert failing.rows() == [("12+345=", "add", 3, 2, 3, 1, "357"), ("hello", "chat", None, 1, 1, 0, None),
                              ("7-2=", "sub", 1, 1, 2, 1, "5")]
    corrections = warehouse.query("SELECT event_id, model_version, tier, completion, correction "
                                  "FROM feedback_corrections")
    assert corrections.rows() == [("ev-6", "2", 1, "7", "5"), ("ev-1", "1", 3, "2", "357")]
