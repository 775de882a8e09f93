"""The judge scorer against the simulated world's judge, a real OpenAI-compatible server on 127.0.0.1: it agrees
with the truth as often as the world's judge is set to, its bias shows, answers are cached, calls stay within the
concurrency, faults are retried and counted, a judge that never answers well is a clear error, and the key stays
secret."""

import os
import random
import time

import httpx
import pytest

from rmi_pipeline.scoring.judge import BadAnswer, JudgeError, JudgeScorer, read_verdicts
from rmi_pipeline.scoring.scorers import ScoreRequest, load_scorer
from rmi_pipeline.settings import Judge
from rmi_pipeline.world.judge import running_judge

KEY = "sk-world-judge-7f3a9c"


def items(n: int, seed: int = 0, long_wrong: bool = False) -> list[tuple[ScoreRequest, bool]]:
    """n questions about prices, half answered right (the reference in the answer), half wrong; with the truth."""
    rng, made = random.Random(seed), []
    for i in range(n):
        price = rng.randrange(10, 10_000)
        right = i % 2 == 0
        said = price if right else price + rng.randrange(1, 50)
        answer = (f"Having checked the whole catalogue and every plan carefully, I am sure it is {said} euros" if
                  long_wrong and not right else f"{said} euros")
        made.append((ScoreRequest(f"What does item {i} cost?", answer, f"{price} euros"), right))
    return made


def judge(url: str, **settings) -> JudgeScorer:
    return load_scorer("judge", Judge(**{"url": url, "api_key": KEY, "timeout_seconds": 5.0, **settings}))


def stats(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/stats").json()


@pytest.fixture(scope="module")
def perfect():
    """A judge that never errs, behind a key."""
    with running_judge(api_key=KEY) as url:
        yield url


def test_a_perfect_judge_agrees_with_the_truth(perfect):
    made = items(60) + [(ScoreRequest("What does item 99 cost?", "12 euros", None), False)]  # no reference: fail
    scorer = judge(perfect, criteria=("correct: the answer states the reference's price", "currency: in euros"))
    scores = scorer.score_many([row for row, _ in made])
    assert [value for value, _ in scores] == [float(truth) for _, truth in made]
    assert scores[0][1].startswith("correct: pass (") and "; currency: pass (" in scores[0][1]
    usage = scorer.usage()
    assert usage["calls"] == len(made)
    assert usage["failures"] == usage["retries"] == 0 and usage["prompt_tokens"] > 0 and usage["completion_tokens"]


def test_the_cache_answers_the_same_items_again_without_a_call(perfect):
    made = [row for row, _ in items(20, seed=1)]
    cache: dict[str, dict] = {}
    scorer = judge(perfect, input_price=2.0, output_price=10.0)
    first = scorer.score_many(made)
    before = stats(perfect)["requests"]
    assert scorer.score_many(made) == first
    assert JudgeScorer(scorer.settings, cache=scorer.cache).score_many(made) == first  # a persisted cache
    assert stats(perfect)["requests"] == before
    usage = scorer.usage()
    assert usage["calls"] == 20 and usage["cached"] == 20
    assert usage["cost"] == pytest.approx((usage["prompt_tokens"] * 2.0 + usage["completion_tokens"] * 10.0) / 1e6)
    scorer = JudgeScorer(scorer.settings, cache=cache)
    scorer.score_many(made + made)  # the same answer twice in one batch is asked once
    assert stats(perfect)["requests"] == before + 20 and scorer.usage()["cached"] == 20 and len(cache) == 20
    other_rubric = judge(perfect, criteria=("brief: at most five words",))
    other_rubric.score_many(made[:5])
    assert other_rubric.usage()["calls"] == 5  # a new rubric is a new answer


def test_the_key_is_required_by_the_judge_sent_by_the_client_and_never_shown(perfect):
    assert httpx.get(f"{perfect}/models").status_code == 401
    assert httpx.get(f"{perfect}/models", headers={"Authorization": f"Bearer {KEY}"}).json()["data"][0]["id"] == \
        "judge"
    assert httpx.post(f"{perfect}/chat/completions", json={}, headers={"Authorization": "Bearer wrong"}).status_code \
        == 401
    assert judge(perfect).score("What does item 1 cost?", "5 euros", "5 euros", {})[0] == 1.0
    wrong = "sk-wrong-key-0123456789"
    scorer = judge(perfect, api_key=wrong, retries=3)
    with pytest.raises(JudgeError) as caught:
        scorer.score("What does item 1 cost?", "5 euros", "5 euros", {})
    assert "HTTP 401 from the judge (the key was refused)" in str(caught.value)
    assert scorer.usage()["calls"] == 1  # a refused key is not asked again
    for shown in (str(caught.value), repr(caught.value), repr(scorer), repr(scorer.settings)):
        assert wrong not in shown and KEY not in shown


def test_an_erring_judge_flips_about_its_error_rate_deterministically():
    made = items(300, seed=2)
    with running_judge(error_rate=0.2, seed=5) as url:
        scorer = judge(url, concurrency=16)
        values = [value for value, _ in scorer.score_many([row for row, _ in made])]
        flipped = sum(value != truth for value, (_, truth) in zip(values, made, strict=True))
        assert flipped == stats(url)["flipped"]
        assert abs(flipped / 300 - 0.2) < 0.07
        again = judge(url).score_many([row for row, _ in made[:40]])  # a fresh cache: the same verdicts
        assert [value for value, _ in again] == values[:40]


def test_a_length_biased_judge_passes_long_wrong_answers_more_than_short_ones():
    short, long = items(200, seed=3), items(200, seed=3, long_wrong=True)
    with running_judge(length_bias=0.5) as url:
        scorer = judge(url, concurrency=16)
        short_values = [v for v, _ in scorer.score_many([row for row, _ in short])]
        long_values = [v for v, _ in scorer.score_many([row for row, _ in long])]
        length_passed = stats(url)["length_passed"]
    wrong_short = [v for v, (_, truth) in zip(short_values, short, strict=True) if not truth]
    wrong_long = [v for v, (_, truth) in zip(long_values, long, strict=True) if not truth]
    assert sum(wrong_short) == 0
    assert 0.35 < sum(wrong_long) / len(wrong_long) < 0.65 and sum(wrong_long) == length_passed
    assert all(v == 1.0 for v, (_, truth) in zip(long_values, long, strict=True) if truth)


def test_calls_in_flight_stay_within_the_concurrency():
    with running_judge(delay_seconds=0.2) as url:
        started = time.monotonic()
        judge(url, concurrency=3).score_many([row for row, _ in items(12, seed=4)])
        took = time.monotonic() - started
        assert stats(url)["max_in_flight"] == 3
    assert took >= 0.8  # 12 answers, 3 at a time, 0.2 s each


def test_faults_are_retried_and_counted_until_every_answer_is_graded():
    made = items(40, seed=6)
    faults = dict(timeout_share=0.1, http_error_share=0.1, non_json_share=0.1, out_of_range_share=0.1)
    with running_judge(seed=1, stall_seconds=3, **faults) as url:
        scorer = judge(url, retries=8, timeout_seconds=0.5, concurrency=16)
        scorer.backoff_seconds = 0.01
        values = [v for v, _ in scorer.score_many([row for row, _ in made])]
        seen = stats(url)
    assert values == [float(truth) for _, truth in made]
    assert all(seen[f] > 0 for f in ("timeout", "http_error", "non_json", "out_of_range"))
    usage = scorer.usage()
    assert usage["calls"] == seen["requests"] == 40 + usage["retries"]
    assert usage["retries"] == seen["timeout"] + seen["http_error"] + seen["non_json"] + seen["out_of_range"]
    assert usage["failures"] == 0


@pytest.mark.parametrize("fault, says", [
    ("timeout", "timed out after 0.3 s"),
    ("http_error", "HTTP 500 from the judge"),
    ("non_json", "the reply is not JSON: 'The answer passes"),
    ("out_of_range", "the reply's pass for criterion 'correct' is 2, not a boolean (out of range)"),
])
def test_a_judge_that_never_answers_well_is_a_clear_error(fault, says):
    with running_judge(api_key=KEY, stall_seconds=2, **{f"{fault}_share": 1.0}) as url:
        scorer = judge(url, retries=2, timeout_seconds=0.3)
        scorer.backoff_seconds = 0.01
        rows = [ScoreRequest(f"What does item {i} cost?", f"{i} euros", f"{i} euros") for i in (1, 2)]
        with pytest.raises(JudgeError) as caught:
            scorer.score_many(rows)
    message = str(caught.value)
    hashes = [scorer.key(r.input, r.output, r.target)[:12] for r in rows]
    assert any(message.startswith(f"the judge gave no usable verdict for item {h} after 3 attempts: 1: {says}")
               for h in hashes), message
    assert f"; 3: {says}" in message
    assert "(2 of 2 answers asked failed; this is the first)" in message
    assert KEY not in message and KEY not in repr(caught.value)
    usage = scorer.usage()
    assert usage["failures"] == 2 and usage["retries"] == 4 and usage["calls"] == 6
    assert scorer.cache == {}


def test_a_judge_that_is_down_fails_a_batch_after_a_few_answers_not_after_every_one():
    from rmi_pipeline.scoring.judge import GIVE_UP

    with running_judge(api_key=KEY, non_json_share=1.0) as url:
        scorer = judge(url, retries=0, concurrency=2)
        rows = [ScoreRequest(f"What does item {i} cost?", f"{i} euros", f"{i} euros") for i in range(200)]
        with pytest.raises(JudgeError) as caught:
            scorer.score_many(rows)
        asked = httpx.get(url.removesuffix("/v1") + "/stats").json()["requests"]
    assert GIVE_UP <= asked < GIVE_UP + 2 * 2  # the threads in flight when it gave up finish their answer
    assert "were not asked" in str(caught.value) and scorer.usage()["failures"] == asked


def test_a_reply_missing_a_criterion_is_a_bad_answer():
    rubric = [("correct", "states the price"), ("brief", "at most five words")]
    reply = '{"verdicts": [{"criterion": "correct", "pass": true, "reason": "right"}]}'
    with pytest.raises(BadAnswer, match="no verdict for criterion 'brief' \\(criterion missing\\)"):
        read_verdicts(reply, rubric)
    with pytest.raises(BadAnswer, match="pass for criterion 'correct' is 'yes', not a boolean"):
        read_verdicts('{"verdicts": [{"criterion": "correct", "pass": "yes"}]}', rubric[:1])
    assert read_verdicts('{"verdicts": [{"criterion": "brief", "pass": false}, {"criterion": "correct", '
                         '"pass": true, "reason": "right"}]}', rubric) == [
        {"criterion": "correct", "pass": True, "reason": "right"}, {"criterion": "brief", "pass": False,
                                                                   "reason": ""}]


def test_a_world_names_its_own_truth_by_import_path(tmp_path):
    (tmp_path / "rmi_world_truth.py").write_text("def anything_goes(question, reference, answer):\n    return True\n")
    with running_judge(matcher="rmi_world_truth:anything_goes", env={"PYTHONPATH": os.pathsep.join(
            [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}) as url:
        values = [v for v, _ in judge(url).score_many([row for row, _ in items(10, seed=7)])]
    assert values == [1.0] * 10
