"""How the champion makes data for its successor: the training mix, practice, sampled answers, self-labels, and the
reward model whose picks of its sampled answers train."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from .base import Group

# The full method: the champion's own sources are on; RMI_MIX='{"practice": 0, "rl": 0, "hint_distill": 0,
# "self_label": 0}' leaves feedback alone (docs: self-improvement measures the two against each other).
# thumbs_down (KTO on thumbs) is on: the best mix bench/thumbs.py measured (docs/log.md#2026-12-06-thumbs); pairs
# (DPO), the implicit signals (copied, asked_again) and the reward model's picks (best_of_n) measured no better, and
# asked_again raised the agreement with users who assert a wrong answer: off.
DEFAULT_MIX = {"feedback": 0.25, "corrections": 0.15, "replay": 0.3, "practice": 0.1, "rl": 0.1,
               "hint_distill": 0.05, "self_label": 0.05, "thumbs_down": 0.15, "pairs": 0.0, "copied": 0.0,
               "asked_again": 0.0, "best_of_n": 0.0}
SOURCES = tuple(DEFAULT_MIX)


class Practice(Group):
    """Practice: generated problems at the champion's frontier, which RL and the coach also use."""

    model_config = SettingsConfigDict(env_prefix="RMI_PRACTICE_")

    problems: int = Field(default=1000, description="Generated problems per skill and cycle, from the first tier not "
                          "yet solved up; past tier 10 (ml.curriculum.FULL_COUNT_TIER) fewer, in proportion. Where "
                          "the champion is rarely right few become rows, so a top tier needs many.")
    tiers: int = Field(default=2, ge=1, description="Tiers practised and self-labelled per skill: the first not yet "
                       "solved and this many minus one past it.")
    failed_prompts: int = Field(default=300, description="Latest thumbs-down prompts of the champion that RL and the "
                                "coach retry each cycle.")
    hint_distillation: Literal["answers", "tokens"] | None = Field(default=None, description=(
        "How hinted successes (hint_distill) teach: 'answers' trains on the hinted answer under the plain prompt; "
        "'tokens' pulls the unhinted model's next-token distributions on that answer toward the hinted model's "
        "(KL; only for recipes whose hints are words). Unset: the recipe's choice."))


class Sampling(Group):
    """Sampled answers: RL's groups, practice's attempts, the coach's unhinted retry, self-labelling's votes."""

    model_config = SettingsConfigDict(env_prefix="RMI_SAMPLE_")

    rollouts: int = Field(default=8, description="Sampled answers per problem in an RL group and in practice.")
    temperature: float = Field(default=0.7, description="Temperature of sampled answers.")


class SelfLabelling(Group):
    """Self-labels: the champion's own answers past its reliable range, kept where its checks back them up."""

    model_config = SettingsConfigDict(env_prefix="RMI_SELF_LABEL_")

    problems: int = Field(default=1000, description="Problems per skill and tier the champion labels past its "
                          "reliable range (fewer past ml.curriculum.FULL_COUNT_TIER, in proportion). Only the labels "
                          "it backs up are kept, so a mix where self-labels are a large share wants more.")
    votes: int = Field(default=4, description="Sampled answers per problem besides the greedy one: the candidates a "
                       "self-label is checked from (without recipe checks, all must agree).")
    past_suite: bool = Field(default=True, description="A champion reliable up to the eval suite's top tier also "
                             "labels at its own edge past it, found the same way: within the suite it would have "
                             "nothing new to label.")


class RewardModel(Group):
    """The reward model: a head on the champion's backbone trained on users' ratings, whose picks of the champion's
    sampled answers become best_of_n rows where it forecasts held-out ratings better than their base rate."""

    model_config = SettingsConfigDict(env_prefix="RMI_REWARD_")

    ratings: int = Field(default=5000, ge=1, description="Latest rated answers it learns from and is measured on.")
    min_ratings: int = Field(default=200, ge=2, description="Fewest rated answers with both thumbs it trains on; "
                             "fewer, and it waits for more.")
    held_out_share: float = Field(default=0.2, gt=0, lt=1, description="Share of the rated answers, by a hash of "
                                  "their prompt, kept out of training to measure its calibration on.")
    steps: int = Field(default=200, ge=1, description="Training steps of the head and the backbone.")
    learning_rate: float = Field(default=3e-4, gt=0, description="Peak AdamW rate (warmup, then cosine).")
    batch_size: int = Field(default=32, ge=1, description="Rated answers per step.")
    prompts: int = Field(default=300, ge=1, description="Latest distinct prompts users asked whose sampled answers "
                         "it ranks.")
    samples: int = Field(default=8, ge=1, description="Sampled answers per prompt besides the greedy one "
                         "(RMI_SAMPLE_TEMPERATURE).")
    min_score: float = Field(default=0.5, ge=0, le=1, description="Forecast P(thumbs-up) the best answer must reach "
                             "to become a row.")
