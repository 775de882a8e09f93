"""Exploration in `rmi serve` over real HTTP on 127.0.0.1: RMI_SERVE_EXPLORE_SHARE of the answers, on the champion
and the canary alike, are sampled at RMI_SERVE_EXPLORE_TEMPERATURE, and each one's event (and any feedback on it)
says how; a log from a gateway older than exploration still opens and records."""

import json
import sqlite3

import httpx
import pytest
import torch
from gateway import gateway_in_thread, warehouse_events

from rmi_pipeline.cli.home import prepare_home
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.serving.log import new_response_id
from rmi_pipeline.serving.process import wait_ready
from rmi_pipeline.serving.routing import in_canary
from rmi_pipeline.settings import DEFAULT_RECIPE

R = ArithmeticRecipe()
PROMPTS = [f"{a}+{b}=" for a, b in zip(range(100, 400), range(900, 1200), strict=True)]  # 300


@pytest.fixture
def two_versions(rmi_env):
    """Two untrained versions: v1 champion, v2 registered (the canary where a test starts it)."""
    prepare_home(rmi_env)
    registry = build_resources(rmi_env)["registry"]
    torch.manual_seed(0)
    with registry.run("serving", tags={}) as run_id:
        for _ in range(2):
            registry.register_model(run_id, R.checkpoint(R.build_model(0.0, 1)), DEFAULT_RECIPE, tags={})
    registry.promote("1", {"promoted_by": "test"})
    return rmi_env, registry


def with_serving(settings, **serving):
    return settings.model_copy(update={"serving": settings.serving.model_copy(update=serving)})


def ask(url: str, prompts: list[str], user_id: str = "u") -> list[dict]:
    answers = []
    for start in range(0, len(prompts), 64):  # RMI_SERVE_MAX_PROMPTS
        reply = httpx.post(f"{url}/v1/answers", json={"prompts": prompts[start:start + 64], "user_id": user_id},
                           timeout=60)
        assert reply.status_code == 200, reply.text
        answers += reply.json()["answers"]
    return answers


def written_events(settings) -> list[dict]:
    """Every event in the batch files the gateway wrote into the object store's incoming/."""
    import io

    import polars as pl

    store = build_resources(settings)["storage"]
    return [e for key in store.list(layout.INCOMING) for e in pl.read_parquet(io.BytesIO(store.read_bytes(key)))
            .to_dicts()]


def rated_in_warehouse(settings) -> dict[str, dict]:
    """Each rated event's sampling, as the warehouse holds it after ingest, by the response id it rates."""
    warehouse_events(settings)  # ingests what the gateway wrote
    with build_resources(settings)["warehouse"].connect(read_only=True) as conn:
        rows = conn.sql("SELECT meta->>'response_id', meta->'temperature', meta->'sample_seed' FROM feedback_events "
                        "WHERE rating IS NOT NULL").fetchall()
    return {rid: {"temperature": json.loads(t) if t else None, "sample_seed": json.loads(s) if s else None}
            for rid, t, s in rows}


def sampling(event: dict) -> tuple:
    meta = event["meta"]
    return meta.get("temperature"), meta.get("sample_seed")


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_at_share_1_every_answer_is_logged_with_its_temperature_and_seed_and_at_0_none_is(two_versions, share):
    settings, _ = two_versions
    with gateway_in_thread(with_serving(settings, explore_share=share, explore_temperature=0.9)) as url:
        wait_ready(url, "1")
        answers = ask(url, PROMPTS[:40])
        httpx.post(f"{url}/v1/flush").raise_for_status()
    assert all(a.keys() == {"response_id", "completion", "model_version"} for a in answers)  # the reply as before
    events = {e["meta"]["response_id"]: e for e in written_events(settings)}
    assert set(events) == {a["response_id"] for a in answers}
    if share:
        assert all(sampling(e)[0] == 0.9 and isinstance(sampling(e)[1], int) for e in events.values())
    else:
        assert all(sampling(e) == (None, None) for e in events.values())


def test_half_the_answers_of_both_arms_are_explored_and_feedback_on_one_says_how_it_was_sampled(two_versions):
    """At share 0.5, about half the answers of the champion and of the canary are sampled (the canary's verdict
    compares their thumbs, so both explore alike); a thumbs-down on an explored answer lands in the warehouse with
    that answer's temperature and seed, one on a greedy answer with neither."""
    from rmi_pipeline.resources.registry import CANARY

    settings, registry = two_versions
    settings = settings.model_copy(update={"canary": settings.canary.model_copy(update={"share": 0.5})})
    registry.start_canary("2", {})
    users = [f"user-{i}" for i in range(20)]
    assert {in_canary(u, "2", settings.canary.share) for u in users} == {True, False}
    with gateway_in_thread(with_serving(settings, explore_share=0.5)) as url:
        wait_ready(url, "1", canary="2")
        answers = [a for i, u in enumerate(users) for a in ask(url, PROMPTS[i * 15:(i + 1) * 15], u)]
        httpx.post(f"{url}/v1/flush").raise_for_status()
        events = {e["meta"]["response_id"]: e for e in written_events(settings)}
        explored = next(a for a in answers if sampling(events[a["response_id"]])[0] is not None)
        greedy = next(a for a in answers if sampling(events[a["response_id"]])[0] is None)
        for answer in (explored, greedy):
            sent = httpx.post(f"{url}/v1/feedback", json={"response_id": answer["response_id"], "rating": "down"})
            assert sent.status_code == 202, sent.text
        httpx.post(f"{url}/v1/flush").raise_for_status()
    for arm in ("champion", CANARY):
        given = [e for e in events.values() if e["meta"]["arm"] == arm]
        share = sum(sampling(e)[0] is not None for e in given) / len(given)
        assert len(given) >= 50 and 0.3 <= share <= 0.7, (arm, len(given), share)
    assert all(sampling(e)[0] in (None, 0.7) for e in events.values())
    rated = rated_in_warehouse(settings)
    assert rated[explored["response_id"]] == {"temperature": 0.7,
                                              "sample_seed": sampling(events[explored["response_id"]])[1]}
    assert rated[greedy["response_id"]] == {"temperature": None, "sample_seed": None}


OLD_ANSWERS = """CREATE TABLE answers (response_id TEXT PRIMARY KEY, at REAL NOT NULL, user_id TEXT NOT NULL,
    model_version TEXT NOT NULL, prompt TEXT NOT NULL, completion TEXT NOT NULL, skill TEXT, arm TEXT NOT NULL)"""


def test_a_gateway_restarted_on_a_log_from_before_exploration_answers_and_takes_feedback_on_old_answers(
        two_versions, tmp_path):
    settings, _ = two_versions
    path, old = tmp_path / "old-log.sqlite3", new_response_id()
    with sqlite3.connect(path) as conn:  # as the gateway before exploration left it: an answer given, not flushed
        conn.execute(OLD_ANSWERS)
        conn.execute("INSERT INTO answers VALUES (?, strftime('%s', 'now'), 'ann', '1', '2+2=', '4', 'add', "
                     "'champion')", (old,))
    with gateway_in_thread(with_serving(settings, log_path=path, explore_share=1.0)) as url:
        wait_ready(url, "1")
        [new] = ask(url, ["3+4="])
        for rid in (old, new["response_id"]):
            assert httpx.post(f"{url}/v1/feedback", json={"response_id": rid, "rating": "up"}).status_code == 202
        httpx.post(f"{url}/v1/flush").raise_for_status()
    rated = {e["meta"]["response_id"]: e for e in written_events(settings) if e["rating"] == "up"}
    assert rated[old]["completion"] == "4" and sampling(rated[old]) == (None, None)
    assert sampling(rated[new["response_id"]])[0] == 0.7
    with sqlite3.connect(path) as conn:
        assert json.loads(conn.execute("SELECT sampling FROM answers WHERE response_id = ?",
                                       (new["response_id"],)).fetchone()[0])["temperature"] == 0.7
