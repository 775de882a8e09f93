"""How the champion teaches its successor: RL groups, a coach's hints, self-labels, and the training mix."""

import random

import pytest
import torch

from rmi_pipeline.ml.rl import coach, rollouts
from rmi_pipeline.ml.self_label import self_label
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.recipes.arithmetic import tokens as tok

R = ArithmeticRecipe()


class Scripted(torch.nn.Module):
    """A model whose next-token scores depend only on the answer step: {step: {token: score}}; else '0'."""

    def __init__(self, script: dict[int, dict[str, float]]):
        super().__init__()
        self.script = script
        self.p = torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx):
        step = idx.shape[1] - tok.PROMPT_LEN
        logits = torch.full((*idx.shape, len(tok.VOCAB)), -20.0)
        for token, score in self.script.get(step, {"0": 10.0}).items():
            logits[:, -1, tok.STOI[token]] = score
        return logits


def test_a_hint_from_the_critique_turns_a_failure_into_a_distilled_success():
    model = Scripted({0: {"7": 2.0, "8": 1.0}})  # says 7; its second choice is 8
    assert R.answer(model, ["3+5="]) == ["7"]
    critique = R.verify("3+5=", "7")[1]
    assert R.hinted_answer(model, ["3+5="], ["7"], [critique]) == ["8"]
    result = coach(R, model, ["3+5=", "3+4="], temperature=1.0, seed=0)
    assert (result.failed, result.hinted, result.solved_with_hint) == (1, 1, 1)
    assert result.rows == [{"prompt": "3+5=", "target": "8"}]  # the hint is not in the distilled row


def test_a_critique_without_a_usable_hint_gives_no_second_attempt():
    model = Scripted({0: {"7": 2.0}, 1: {"7": 2.0}})  # "77": the wrong number of digits, no place to fix
    assert R.hinted_answer(model, ["3+5="], ["77"], [R.verify("3+5=", "77")[1]]) == [None]


def test_rl_rewards_answers_against_their_group_and_drops_groups_that_all_score_alike():
    model = Scripted({0: {"7": 1.0, "8": 1.0}})  # a coin flip between 7 and 8
    out = rollouts(R, model, ["3+5=", "0+0="], k=16, temperature=1.0, seed=1)
    assert out.informative_groups == 1 and {r["prompt"] for r in out.rows} == {"3+5="}  # 0+0 is never 7 or 8
    right = [r["scale"] for r in out.rows if r["target"] == "8"]
    wrong = [r["scale"] for r in out.rows if r["target"] == "7"]
    assert right and wrong and min(right) > 0 > max(wrong)
    assert abs(sum(right) + sum(wrong)) < 1e-9  # group-relative: advantages sum to zero
    assert 0 < out.solved_share < 1 and out.samples == 32


def test_self_labels_come_from_the_first_unsure_tier_and_keep_only_agreed_plausible_answers():
    confident = Scripted({0: {"7": 30.0}})  # always "7": agrees with itself everywhere
    out = self_label(R, confident, random.Random(0), per_tier=50, votes=4, temperature=1.0, saturation=0.9, seed=0)
    # 1-digit sums may be 7; a 2-digit sum cannot have 1 digit, so the length filter rejects every label there
    assert out.agreement["add/1"] == 1.0 and out.agreement["add/2"] == 0.0
    assert out.tiers["add"] == 2 and not [r for r in out.rows if r["prompt"].count("+")]
    unsure = Scripted({0: {"7": 1.0, "8": 1.0}})  # votes split: tier 1 is already unsure, few labels survive
    out = self_label(R, unsure, random.Random(0), per_tier=50, votes=4, temperature=1.0, saturation=0.9, seed=0)
    assert out.tiers == {"add": 1, "sub": 1} and max(out.agreement.values()) < 0.25
    assert {r["target"] for r in out.rows} == {"7"}  # a kept label is the greedy answer every vote agreed with


def test_the_training_mix_rejects_unknown_sources(monkeypatch):
    from rmi_pipeline.settings import DEFAULT_MIX, Settings

    monkeypatch.setenv("RMI_MIX", '{"rl": 0}')
    assert Settings().mix == {**DEFAULT_MIX, "rl": 0.0}
    monkeypatch.setenv("RMI_MIX", '{"reinforcement": 1}')
    with pytest.raises(ValueError, match="unknown training sources"):
        Settings()
