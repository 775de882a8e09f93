"""The default arithmetic recipe: problems, tokens, the verifier and eval-suite hygiene."""

import random

import pytest
import torch

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.recipes.arithmetic import tokens as tok
from rmi_pipeline.recipes.base import load_recipe

R = ArithmeticRecipe()


def test_generated_problems_have_their_tier_and_true_answers():
    rng = random.Random(0)
    for task in R.sample_tasks(rng, 500, list(R.skills), list(R.tiers)):
        a, b = (int(x) for x in task.prompt[:-1].replace("-", "+").split("+"))
        assert R.slice_of(task.prompt) == (task.skill, task.tier)
        assert int(task.answer) == (a + b if task.skill == "add" else a - b) >= 0


def test_training_rows_put_loss_only_on_the_answer_and_decode_back():
    ids, mask = R.encode(None, ["123+45="], ["168"])
    assert ids.shape == (1, tok.BLOCK_SIZE) and mask.sum() == tok.ANSWER_LEN
    assert ids.dtype == torch.uint8  # a byte per token: millions of rows stay small
    answer_ids = ids[0, tok.PROMPT_LEN:].tolist()
    assert tok.read_answer(answer_ids) == "168"
    for texts in (["123", "12"], ["12a"]):  # rows of different lengths, a character the model has no token for
        with pytest.raises(ValueError):
            tok.encode(texts)


def test_only_whole_ascii_problems_and_answers_are_valid():
    """Feedback text is untrusted: a trailing newline or another script's digits is not a problem the model knows."""
    assert R.is_valid_prompt("12+3=") and R.is_valid_completion("15")
    for prompt in ("12+3=\n", "\u0661\u0662+3=", " 12+3=", "12+3", "123456789+1=", "3-12="):
        assert not R.is_valid_prompt(prompt), prompt
    for answer in ("15\n", "\u0661\u0665", "-3", "1234567890", ""):
        assert not R.is_valid_completion(answer), answer


def test_greedy_answers_come_back_in_reading_order():
    class Echo(torch.nn.Module):
        """Always predicts the digit 7: the answer should read 777777777."""

        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(1))

        def forward(self, idx):
            logits = torch.zeros(*idx.shape, len(tok.VOCAB))
            logits[..., tok.STOI["7"]] = 1
            return logits

    assert R.answer(Echo(), ["1+1=", "bad prompt", "99-3="]) == ["777777777", "", "777777777"]


@pytest.mark.parametrize("size", ["tiny", "tiny-places"])
def test_decoding_with_cached_keys_gives_the_tokens_of_recomputing_every_step(size):
    from rmi_pipeline.ml.decoding import decode

    torch.manual_seed(0)
    net = R.build_model(3e-3, 10, size).model.eval()
    with torch.no_grad():  # weights far from the init's near-uniform output, so answers vary from row to row
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    prompts = tok.encode([tok.model_prompt(a, op, b) for a, op, b in [(123, "+", 45), (9_999_999, "-", 8), (7, "+", 7)]
                          for _ in range(20)])
    for temperature in (0.0, 1.0):
        cached = decode(net, prompts, tok.ANSWER_LEN, temperature=temperature,
                        generator=torch.Generator().manual_seed(1))
        generator, idx = torch.Generator().manual_seed(1), prompts
        with torch.no_grad():
            for _ in range(tok.ANSWER_LEN):
                logits = net(idx)[:, -1]
                nxt = (torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)
                       if temperature else logits.argmax(-1, keepdim=True))
                idx = torch.cat([idx, nxt], dim=1)
        assert torch.equal(cached, idx[:, tok.PROMPT_LEN:])
        assert len({tuple(row) for row in cached.tolist()}) >= (4 if temperature else 3)  # not one answer for all


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
