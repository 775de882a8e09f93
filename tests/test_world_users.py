"""The simulated users rate like real ones: a share of answers rated, a few thumbs-down corrected, implicit signals
(copied, asked again) where an app would see them, some users wrong; and every answer is accounted for."""

import random
from collections import Counter

import httpx
import pytest
from gateway import gateway_in_thread, warehouse_events

from rmi_pipeline.recipes.base import Task
from rmi_pipeline.world.users import ASKED_AGAIN, COPIED, Reactions, react

N = 20_000  # answers per share measured: a share of 0.1 is then within 0.01 with room to spare


def reactions_to(answers: list[tuple[Task, str]], reactions: Reactions, seed: int = 0) -> list[dict | None]:
    rng = random.Random(seed)
    return [react(rng, task, completion, f"r{i}", reactions, well_formed=True)
            for i, (task, completion) in enumerate(answers)]


def half_right(n: int = N) -> list[tuple[Task, str]]:
    """Answers to `n` questions, every other one wrong."""
    task = Task(prompt="2+2=", answer="4", skill="add", tier=1)
    return [(task, "4" if i % 2 else "5") for i in range(n)]


def test_a_tenth_of_answers_are_rated_and_a_twentieth_of_thumbs_down_on_wrong_answers_corrected():
    answers = half_right()
    said = reactions_to(answers, Reactions(wrong_user_share=0.0, correction_share=0.05, rating_share=0.1))
    rated = [f for f in said if f and f["rating"]]
    assert abs(len(rated) / N - 0.1) < 0.01
    down = [f for f in rated if f["rating"] == "down"]
    assert abs(sum(f["correction"] == "4" for f in down) / len(down) - 0.05) < 0.025
    assert sum(f is None for f in said) > 0.85 * N  # no implicit shares set: the rest is silence


def test_every_answer_is_rated_implicit_or_silent_and_the_signals_follow_what_the_user_took_it_for():
    answers = half_right()
    said = reactions_to(answers, Reactions(wrong_user_share=0.0, correction_share=0.05, rating_share=0.1,
                                           copy_share=0.4, ask_again_share=0.6))
    kinds = Counter("rated" if f and f["rating"] else f["meta"]["signal"] if f else "silent" for f in said)
    assert sum(kinds.values()) == N and set(kinds) == {"rated", COPIED, ASKED_AGAIN, "silent"}
    unrated_right = sum(1 for (_, c), f in zip(answers, said, strict=True) if c == "4" and not (f and f["rating"]))
    unrated_wrong = sum(1 for (_, c), f in zip(answers, said, strict=True) if c == "5" and not (f and f["rating"]))
    assert abs(kinds[COPIED] / unrated_right - 0.4) < 0.03 and abs(kinds[ASKED_AGAIN] / unrated_wrong - 0.6) < 0.03
    signalled = [(c, f) for (_, c), f in zip(answers, said, strict=True) if f and f["rating"] is None]
    assert {c for c, f in signalled if f["meta"]["signal"] == COPIED} == {"4"}  # honest users copy right ones only
    assert all(f["correction"] is None and f["source"] == "user" for _, f in signalled)


def test_wrong_users_invert_their_verdict_at_their_share_in_ratings_and_signals_alike():
    answers = half_right()
    said = reactions_to(answers, Reactions(wrong_user_share=0.2, correction_share=0.0, rating_share=0.5,
                                           copy_share=1.0, ask_again_share=1.0))
    rated = [(c, f["rating"]) for (_, c), f in zip(answers, said, strict=True) if f["rating"]]
    contrary = sum((c == "4") != (rating == "up") for c, rating in rated)
    assert abs(contrary / len(rated) - 0.2) < 0.02
    copied = [c for (_, c), f in zip(answers, said, strict=True) if f["meta"].get("signal") == COPIED]
    assert abs(copied.count("5") / len(copied) - 0.2) < 0.03  # a wrong answer copied now and then


def test_the_monitor_reports_every_malformed_answer_it_sees_whatever_the_rating_share():
    rng, task = random.Random(1), Task(prompt="2+2=", answer="4", skill="add", tier=1)
    said = [react(rng, task, "four?", f"r{i}", Reactions(0.0, 0.05, rating_share=0.1), well_formed=False)
            for i in range(200)]
    assert all(f["rating"] == "down" and f["source"] == "report" and f["user_id"].startswith("monitor-")
               for f in said)


def test_a_world_that_rates_every_answer_draws_no_more_numbers_than_before_the_shares():
    """Shares of 1 and 0 draw nothing: runs measured in the world that rated everything keep their figures."""
    answers = half_right(500)
    everything = Reactions(wrong_user_share=0.05, correction_share=0.6)  # rating 1, no implicit signals
    first, second = random.Random(3), random.Random(3)
    for i, (task, completion) in enumerate(answers):
        react(first, task, completion, f"r{i}", everything, well_formed=True)
    for task, completion in answers:  # what the world drew per answer before the shares, as it drew it
        right = completion == task.answer
        judged_right = right if second.random() >= 0.05 else not right
        if not judged_right:
            if not right and second.random() < 0.6:
                pass  # a correction
            elif second.random() < 0.3:
                second.choice(["wrong", "that's not right", "not quite", "almost"])
        second.choice(["web", "ios", "android", "api"])
    assert first.random() == second.random()


@pytest.fixture
def mixed_champion(rmi_env, monkeypatch):
    """A champion right up to 3 digits and wrong past them (tests/knowing_recipe.py): users of cycle 1, who ask up
    to 5 digits, get about 60% right answers. Returns the settings a gateway and the world read."""
    from knowing_recipe import KnowsUpTo

    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.settings import Settings

    monkeypatch.setattr(KnowsUpTo, "knows", 1)
    for key, value in {"RMI_RECIPE": "knowing_recipe:KnowsUpTo", "RMI_SIM_QUERIES_PER_CYCLE": "400",
                       "RMI_SIM_RATING_SHARE": "0.1", "RMI_SIM_CORRECTION_SHARE": "0.05",
                       "RMI_SIM_COPY_SHARE": "0.5", "RMI_SIM_ASK_AGAIN_SHARE": "0.5",
                       "RMI_SIM_MALFORMED_SHARE": "0", "RMI_SIM_EVAL_LIKE_SHARE": "0"}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    prepare_home(settings)
    recipe, registry = KnowsUpTo(), build_resources(settings)["registry"]
    with registry.run("serving", tags={}) as run_id:
        version = registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)),
                                          "knowing_recipe:KnowsUpTo", tags={}).version
    registry.promote(version, {"promoted_by": "test"})
    return settings


def test_ratings_and_implicit_signals_reach_the_warehouse_through_the_gateway_and_every_answer_is_counted(
        mixed_champion):
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.serving.process import wait_ready
    from rmi_pipeline.world import World

    settings = mixed_champion
    with gateway_in_thread(settings) as url:
        wait_ready(url, "1")
        world = World(settings, url)
        _, stats = world.serve(1, random.Random(0))
        answer = httpx.post(f"{url}/v1/answers", json={"prompts": ["1+1="], "user_id": "u"}).json()["answers"][0]
        bare = httpx.post(f"{url}/v1/feedback", json={"response_id": answer["response_id"], "rating": None})
        signalled = httpx.post(f"{url}/v1/feedback", json={"response_id": answer["response_id"], "rating": None,
                                                           "meta": {"signal": COPIED}})
        httpx.post(f"{url}/v1/flush").raise_for_status()
    assert bare.status_code == 422 and "meta.signal" in bare.text  # a null rating that names no signal says nothing
    assert signalled.status_code == 202

    implicit = stats["implicit"]
    assert stats["queries"] == 400 == stats["rated"] + implicit[COPIED] + implicit[ASKED_AGAIN] + stats["silent"]
    assert 0.5 < stats["served_accuracy"] < 0.7 and 20 <= stats["rated"] <= 65 and stats["refused"] == 0
    assert implicit[COPIED] > 50 and implicit[ASKED_AGAIN] > 30
    assert stats["asked_again_answers"] == implicit[ASKED_AGAIN]

    warehouse_events(settings)  # one ingest of what the gateway wrote
    rows = build_resources(settings)["warehouse"].query(
        "SELECT rating, correction, prompt, meta->>'signal' AS signal, meta->>'again' AS again, "
        "meta->>'response_id' AS response_id FROM feedback_events").to_dicts()
    assert sum(r["rating"] is not None for r in rows) == stats["rated"]
    assert sum(r["rating"] == "down" for r in rows) == stats["down"]
    assert sum(r["correction"] is not None for r in rows) == stats["corrections"]
    signals = Counter(r["signal"] for r in rows if r["rating"] is None and r["signal"])
    assert signals == Counter({COPIED: implicit[COPIED] + 1, ASKED_AGAIN: implicit[ASKED_AGAIN]})  # none quarantined
    answers = {r["response_id"]: r["prompt"] for r in rows if r["rating"] is None and not r["signal"]}
    assert len(answers) == 400 + implicit[ASKED_AGAIN] + 1  # each question, each asked again, and ours
    for r in rows:
        if r["signal"] == ASKED_AGAIN:  # the same question asked again: a second answer, linked by the app
            assert answers[r["again"]] == r["prompt"] and r["again"] != r["response_id"]


def test_users_who_assert_a_wrong_answer_rate_by_it_and_the_round_counts_how_often_the_model_agreed(
        mixed_champion, monkeypatch):
    """Every user asserts the answer the scripted champion gives when it is wrong: its wrong answers agree with
    them and are rated up, its right ones down and corrected; the round's accuracy still measures the truth."""
    from dataclasses import replace

    from knowing_recipe import KnowsUpTo, _wrong

    from rmi_pipeline.serving.process import wait_ready
    from rmi_pipeline.settings import Settings
    from rmi_pipeline.world import World
    from rmi_pipeline.world.users import RecipeTask

    class Asserting(RecipeTask):
        def belief(self, task, completion):
            return replace(task, answer=_wrong(task.answer)), completion == _wrong(task.answer)

    for key, value in {"RMI_SIM_WRONG_USER_SHARE": "0", "RMI_SIM_RATING_SHARE": "1",
                       "RMI_SIM_CORRECTION_SHARE": "1"}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    with gateway_in_thread(settings) as url:
        wait_ready(url, "1")
        _, stats = World(settings, url, task=Asserting(KnowsUpTo())).serve(1, random.Random(0))
    wrong = round(stats["queries"] * (1 - stats["served_accuracy"]))
    assert stats["asserting"] == stats["queries"] == 400 and 0.5 < stats["served_accuracy"] < 0.7
    assert stats["agreed_with_asserting"] == stats["up"] == wrong
    assert stats["down"] == stats["corrections"] == 400 - wrong


def test_the_run_table_states_the_shares_its_users_rate_and_correct_and_what_they_did(rmi_env, monkeypatch):
    from rmi_pipeline.cli.report import CycleRecord
    from rmi_pipeline.cli.run import users_line
    from rmi_pipeline.settings import Settings

    monkeypatch.setenv("RMI_SIM_RATING_SHARE", "0.1")
    monkeypatch.setenv("RMI_SIM_CORRECTION_SHARE", "0.05")
    line = users_line(Settings())
    assert "rate 10% of answers" in line and "correct 5% of their thumbs-down" in line
    world = {"queries": 600, "rated": 61, "down": 20, "corrections": 1, "implicit": {COPIED: 90, ASKED_AGAIN: 40}}
    line = users_line(Settings(), [CycleRecord(cycle=0), CycleRecord(cycle=1, world=world)])
    assert line.endswith("over the run: 600 questions, 61 rated, 20 thumbs-down, 1 corrections, 130 implicit signals")
