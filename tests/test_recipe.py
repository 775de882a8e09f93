"""The default arithmetic recipe: problems, tokens, the verifier and eval-suite hygiene."""

import random

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
    ids, mask = R.encode(["123+45="], ["168"])
    assert ids.shape == (1, tok.BLOCK_SIZE) and mask.sum() == tok.ANSWER_LEN
    answer_ids = ids[0, tok.PROMPT_LEN:].tolist()
    assert tok.read_answer(answer_ids) == "168"


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
