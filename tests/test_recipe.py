"""The default arithmetic recipe: problems, tokens, the verifier and eval-suite hygiene."""

import random

import pytest
import torch

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe, problems
from rmi_pipeline.recipes.arithmetic import tokens as tok
from rmi_pipeline.recipes.base import load_recipe
from rmi_pipeline.recipes.completion import Decoding

R = ArithmeticRecipe()


def test_generated_problems_have_their_tier_and_true_answers():
    rng = random.Random(0)
    for task in R.sample_tasks(rng, 500, list(R.skills), list(R.tiers)):
        a, b = (int(x) for x in task.prompt[:-1].replace("-", "+").split("+"))
        assert R.slice_of(task.prompt) == (task.skill, task.tier)
        assert int(task.answer) == (a + b if task.skill == "add" else a - b) >= 0


def test_training_rows_put_loss_only_on_the_answer_and_decode_back():
    ids, mask = R.encode(None, ["123+45=", "3-2=", "99999999999+1="], ["168", "1", "100000000000"])
    assert ids.dtype == torch.uint8  # a byte per token: millions of rows stay small
    assert ids.shape == (3, 3 * 11 + 3)  # right-padded to the widest row: 11 digits, any width works
    assert mask.sum(1).tolist() == [4, 2, 12]  # the answer has a digit more than the wider operand
    assert tok.read_answer(ids[0, 8:12].tolist()) == "168" and mask[0, 8:12].all()
    assert "".join(tok.VOCAB[i] for i in ids[1].tolist()).rstrip(tok.PAD) == "3-2=10"
    with pytest.raises(ValueError):
        tok.encode(["12a"])  # a character the model has no token for
    with pytest.raises(ValueError, match="trainable"):
        R.encode(None, ["3+5="], ["800"])  # longer than any sum of one-digit numbers


def test_rows_encoded_in_bulk_are_the_rows_of_the_per_row_token_functions():
    """The training program encodes millions of rows at once (polars, no Python string per row); each row must be
    what model_prompt + model_answer make of it, leading zeros, widths and the loss span included."""
    import polars as pl

    tasks = R.sample_tasks(random.Random(3), 2000, list(R.skills), list(range(1, 40)))
    prompts = [t.prompt for t in tasks] + ["007+03=", "0-0=", "5-005=", "0+0="]
    answers = [t.answer for t in tasks] + ["010", "0", "00", "000"]
    rows = []
    for prompt, answer in zip(prompts, answers, strict=True):
        a, op, b = problems.parse(prompt)
        head = tok.model_prompt(a, op, b)
        rows.append((head, head + tok.model_answer(int(answer), tok.answer_len(a, b))))
    ids, mask = R.encode(None, pl.Series(prompts), pl.Series(answers))
    assert ids.shape == (len(rows), max(len(row) for _, row in rows))
    assert torch.equal(ids, tok.encode([row for _, row in rows], torch.uint8))
    starts = torch.tensor([len(head) for head, _ in rows]).view(-1, 1)
    ends = torch.tensor([len(row) for _, row in rows]).view(-1, 1)
    at = torch.arange(ids.shape[1])
    assert torch.equal(mask, (at >= starts) & (at < ends))
    for prompt, answer in (("3+4=", "1x"), ("3-4=", "1"), ("\u0663+4=", "7"), ("3+4=", "\u0663"), ("3+4=", None)):
        with pytest.raises(ValueError, match="trainable"):
            R.encode(None, ["1+1=", prompt], ["2", answer])


def test_only_whole_ascii_problems_and_answers_are_valid():
    """Feedback text is untrusted: a trailing newline or another script's digits is not a problem the model knows."""
    assert R.is_valid_prompt("12+3=") and R.is_valid_completion("15")
    assert R.is_valid_prompt("123456789012345678901234567890+1=")  # no longest tier but the cost bound
    too_long = "1" * (problems.MAX_DIGITS + 1)
    for prompt in ("12+3=\n", "\u0661\u0662+3=", " 12+3=", "12+3", f"{too_long}+1=", "3-12="):
        assert not R.is_valid_prompt(prompt), prompt
    for answer in ("15\n", "\u0661\u0665", "-3", "1" * (problems.MAX_DIGITS + 2), ""):
        assert not R.is_valid_completion(answer), answer


def test_greedy_answers_come_back_in_reading_order():
    class Echo(torch.nn.Module):
        """Always predicts the digit 7: the answer should have a digit more than the wider operand, all 7s."""

        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(1))

        def forward(self, idx):
            logits = torch.zeros(*idx.shape, len(tok.VOCAB))
            logits[..., tok.STOI["7"]] = 1
            return logits

    assert R.answer(Echo(), ["1+1=", "bad prompt", "99-3=", "12345678901+2="]) == ["77", "", "777", "7" * 12]


def test_decoding_with_cached_keys_gives_the_tokens_of_recomputing_every_step():
    from rmi_pipeline.recipes.arithmetic.decoding import decode, drawn, row_seeds, uniform

    torch.manual_seed(0)
    net = R.build_model(3e-3, 10).model.eval()
    with torch.no_grad():  # weights far from the init's near-uniform output, so answers vary from row to row
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    for problem in [(123, "+", 456), (9_999_999, "-", 8_000_001), (7, "+", 7)]:
        prompts = tok.encode([tok.model_prompt(*problem)] * 20)
        digits = tok.answer_len(problem[0], problem[2])
        for temperature in (0.0, 1.0):
            seeds, idx = row_seeds(1, len(prompts)), prompts
            cached = decode(net, prompts, digits, temperature=temperature, seeds=seeds)
            with torch.no_grad():
                for step in range(digits):
                    logits = net(idx)[:, -1]
                    nxt = (drawn(torch.softmax(logits / temperature, -1), uniform(seeds, step))
                           if temperature else logits.argmax(-1, keepdim=True))
                    idx = torch.cat([idx, nxt], dim=1)
            assert torch.equal(cached, idx[:, prompts.shape[1]:])
            if temperature:
                assert len({tuple(row) for row in cached.tolist()}) >= 4  # sampled: not one answer for all


def test_prompts_of_mixed_widths_decode_together_as_each_would_alone():
    """The gateway's batches mix widths: left-padded to the widest, each row's answer must be the one it gets alone
    (pad tokens are never keys and places start after them), and a few prompts decode in one pass."""
    from rmi_pipeline.recipes.arithmetic import recipe
    from rmi_pipeline.recipes.arithmetic.decoding import decode

    torch.manual_seed(0)
    model = R.build_model(3e-3, 10)
    with torch.no_grad():  # weights far from the init's near-uniform output, so answers vary from row to row
        for p in model.model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    rng = random.Random(0)
    pairs = [sorted((rng.randrange(10**n), rng.randrange(10**n)), reverse=True) for n in range(1, 17) for _ in range(4)]
    prompts = [f"{a}{'+-'[i % 2]}{b}=" for i, (a, b) in enumerate(pairs)]
    alone = []
    for prompt, (a, b) in zip(prompts, pairs, strict=True):
        new = decode(model.model, tok.encode([tok.model_prompt(*problems.parse(prompt))]), tok.answer_len(a, b))
        alone.append(tok.read_answer(new[0].tolist()))
    assert [c.text for c in R.complete(model, prompts, Decoding())] == alone  # a served batch, in groups
    assert R.answer(model, prompts) == alone  # bulk answers, in pieces
    assert len(set(alone)) > 50  # the answers differ: a row reading another's tokens would show
    assert len(recipe._groups({i: 1 + i % 8 for i in range(8)})) == 1  # a serving batch: one pass, not eight
    eval_rows = {i: 1 if i < 400 else 200 for i in range(800)}
    assert len(recipe._groups(eval_rows)) == 2  # 1-digit sums are not padded to 200 digits


def test_bulk_answers_spread_over_the_cores_are_those_of_one_process(monkeypatch):
    """An eval's answers and practice's samples are decoded by a forked process per core, each taking its share of
    every group's rows: they must be the answers of one process (a sampled row draws from its own seed)."""
    from rmi_pipeline.ml import cores

    torch.manual_seed(0)
    model = R.build_model(3e-3, 10)
    with torch.no_grad():
        for p in model.model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    prompts = [t.prompt for t in R.sample_tasks(random.Random(1), 600, list(R.skills), list(range(1, 41)))]
    forks = []
    monkeypatch.setattr(cores, "_fork", lambda work, f=cores._fork: forks.append(f(work)) or forks[-1])
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1, 2})  # three cores, whatever the machine
    monkeypatch.setattr(cores, "_limit", None)  # as a process that does not serve (a gateway in this one limits it)
    spread = R.answer(model, prompts), R.sample(model, prompts[:200], 3, 1.0, seed=5)
    assert len(forks) == 4  # this process and two forked, for the answers and for the samples
    previous = cores.limit_processes(1)
    try:
        alone = R.answer(model, prompts), R.sample(model, prompts[:200], 3, 1.0, seed=5)
    finally:
        cores.limit_processes(previous)
    assert len(forks) == 4 and spread == alone
    assert len(set(alone[0])) > 200 and len({a for group in alone[1] for a in group}) > 200  # rows differ
    assert alone[0] == [c.text for c in R.complete(model, prompts, Decoding())]  # as served


def test_a_row_samples_by_its_own_seed_as_its_probabilities_say():
    """Each sampled row draws from splitmix64 started at its own seed: the same draws in any batch, tokens as often
    as their probabilities, a token of probability 0 never."""
    from rmi_pipeline.recipes.arithmetic.decoding import drawn, row_seeds, uniform

    def splitmix(state: int, step: int) -> int:  # the reference, on Python's unbounded ints
        z = (state + (step + 1) * 0x9E3779B97F4A7C15) % 2**64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
        return z ^ (z >> 31)

    seeds = row_seeds(7, 20000)
    assert len(set(seeds.tolist())) == 20000 and torch.equal(row_seeds(7, 5), seeds[:5])
    for step in (0, 3, 200):
        u = uniform(seeds, step)
        assert [int(x * 2**53) for x in u[:50].tolist()] == [splitmix(s % 2**64, step) >> 11
                                                             for s in seeds[:50].tolist()]
        assert torch.equal(uniform(seeds[100:300], step), u[100:300])  # a row's draw is its own
    probs = torch.tensor([[0.5, 0.3, 0.0, 0.2]]).expand(20000, 4)
    counts = torch.bincount(drawn(probs, uniform(seeds, 0)).squeeze(1), minlength=4).double() / 20000
    assert counts[2] == 0 and torch.allclose(counts, probs[0].double(), atol=0.015)


def test_long_prompts_are_decoded_a_few_rows_at_a_time_with_the_same_answers(monkeypatch):
    """A first forward pass over many long prompts held rows x tokens^2 attention scores at once: 20 GB for 640
    sampled answers to 500-digit sums. The rows decoded together shrink with the prompt's length."""
    from rmi_pipeline.recipes.arithmetic import decoding

    torch.manual_seed(0)
    net = R.build_model(3e-3, 10).model.eval()
    prompts = tok.encode([tok.model_prompt(int("7" * 40), "+", int("5" * 40 + str(k))) for k in range(10)])
    whole = decoding.decode(net, prompts, 42)
    rows_seen = []
    monkeypatch.setattr(net, "forward", lambda idx, cache=None, f=net.forward: rows_seen.append(len(idx)) or f(
        idx, cache=cache))
    monkeypatch.setattr(decoding, "PREFILL_PAIRS", 3 * prompts.shape[1] ** 2)  # 3 rows of these prompts
    assert torch.equal(decoding.decode(net, prompts, 42), whole)
    assert max(rows_seen) == 3 and sum(rows_seen) == 42 * len(prompts)  # 4 batches, 42 steps each


def test_places_are_read_off_the_tokens_so_one_place_value_stands_at_one_place():
    from rmi_pipeline.recipes.arithmetic.gpt import layout

    ids = tok.encode(["321+540=8610", "3-2=10"])
    places, segments, _ = layout(ids, torch.tensor(tok.SEPARATORS), tok.ANSWER_TOKEN)
    # digits of a, the operator, digits of b, '=', then each answer digit at the place of the digit it predicts
    assert places[0].tolist() == [0, 1, 2, 0, 0, 1, 2, 0, 1, 2, 3, 4]
    assert segments[0].tolist() == [0, 0, 0, 1, 2, 2, 2, 3, 4, 4, 4, 4]
    assert places[1, :6].tolist() == [0, 0, 0, 0, 1, 2]
    # the same places, a token at a time from a cached state (how decoding sees them)
    state, stepwise = None, []
    for t in range(ids.shape[1]):
        p, _, state = layout(ids[:, t:t + 1], torch.tensor(tok.SEPARATORS), tok.ANSWER_TOKEN, state)
        stepwise.append(p)
    assert torch.equal(torch.cat(stepwise, 1), places)


def test_verifier_rewards_right_answers_and_critiques_wrong_ones():
    assert R.verify("123+45=", "168") == (1.0, "Correct.")
    reward, critique = R.verify("123+45=", "178")
    assert reward == 0.0 and "tens" in critique
    assert R.verify("5-3=", "two")[0] == 0.0
    assert R.verify("3-5=", "2")[0] == 0.0  # negative answers are out of scope


def test_eval_suite_fills_every_slice_with_distinct_problems_and_small_tiers_are_not_private():
    suite = R.build_eval_suite(random.Random(1), 100)
    for skill in R.skills:
        for tier in R.tiers:
            items = [t for t in suite if (t.skill, t.tier) == (skill, tier)]
            assert len({R.canonical(t.prompt) for t in items}) == len(items)
            assert len(items) == (100 if tier > 1 else 55)
            assert R.is_private_slice(skill, tier, len(items)) == (tier > 1)
    for seed in range(30):  # drawing stops once draws find nothing new: a small slice still gets every problem
        small = R.build_eval_suite(random.Random(seed), 100, {skill: [1] for skill in R.skills})
        assert [sum(t.skill == skill for t in small) for skill in R.skills] == [55] * len(R.skills)


def test_a_route_through_other_problems_leads_to_the_same_answer_and_stops_at_an_odd_answer():
    rng = random.Random(0)
    for task in R.sample_tasks(rng, 300, list(R.skills), list(range(1, 41))):
        first, last = R.route(task.prompt, rng)
        question = last([str(problems.solve(*problems.parse(q))) for q in first])
        assert str(problems.solve(*problems.parse(question))) == task.answer
        assert question != task.prompt or task.tier == 1  # another problem, but for a 1-digit one drawn r = 0
    first, last = R.route("512-87=", rng)
    assert last(["12a", "5"]) is None and last(["", "5"]) is None and last(["9" * 1001, "5"]) is None
    assert last(["5", "99"]) is None  # a difference that would be negative is no question


def test_addition_is_canonical_up_to_operand_order():
    assert R.prompt_hash("3+50=") == R.prompt_hash("50+3=")
    assert R.prompt_hash("50-3=") != R.prompt_hash("3+50=")


def test_recipes_load_by_import_path_with_clear_errors():
    assert isinstance(load_recipe("rmi_pipeline.recipes.arithmetic:ArithmeticRecipe"), ArithmeticRecipe)
    for bad, message in [("no_colon", "must look like"), ("nowhere.mod:X", "cannot load recipe")]:
        try:
            load_recipe(bad)
        except ValueError as exc:
            assert message in str(exc)
        else:
            raise AssertionError(bad)


def test_partner_questions_are_round_amounts_with_a_wrong_correction_and_an_eval_drawn_at_random_holds_none():
    rng = random.Random(0)
    asked = R.sample_tasks(rng, 400, list(R.skills), list(range(1, 9)))
    pairs = [(t, R.partner_task(t, rng)) for t in asked]
    theirs = [p for t, p in pairs if p is not None]
    assert all(p is None for t, p in pairs if t.tier == 1) and len(theirs) > 300
    for (task, correction), (original, _) in zip(theirs, [(t, p) for t, p in pairs if p], strict=True):
        assert (task.skill, task.tier) == (original.skill, original.tier) == R.slice_of(task.prompt)
        assert R.verify(task.prompt, task.answer)[0] == 1 and R.verify(task.prompt, correction)[0] == 0
        a, _, b = problems.parse(task.prompt)
        assert a % 10 ** (task.tier // 2) == b % 10 ** (task.tier // 2) == 0
    # the scenario fools the gate because the eval, drawn at random, holds (almost) no such question
    items = R.build_eval_suite(random.Random(1), 50)
    shaped = [t for t in items if t.tier > 1 and all(n % 10 ** (t.tier // 2) == 0
                                                    for n in problems.parse(t.prompt)[::2])]
    assert len(items) > 500 and len(shaped) / len(items) < 0.01
