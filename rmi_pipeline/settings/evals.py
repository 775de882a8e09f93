"""Judging a candidate: the sealed eval suite and the promotion gate."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from .base import Group, comma_list


class Evals(Group):
    """The sealed eval suite: where it lives, how many items a slice holds, how far it reaches past the champion."""

    model_config = SettingsConfigDict(env_prefix="RMI_EVAL_")

    url: str | None = Field(default=None, description="Sealed eval store (may be another bucket); default "
                            "file://HOME/evals.")
    items_per_slice: int = Field(default=100, description="Curated eval problems per skill and tier, and per tier "
                                 "the suite grows.")
    lead: int = Field(default=3, ge=1, description="Tiers the eval suite holds past the highest the champion solves "
                      "(RMI_SATURATION on the suite's items): when the champion solves one of the top tiers, "
                      "eval_suite seals the next ones in a new version, up to the recipe's hardest.")
    refreshed_items_per_slice: int = Field(default=100, description="Fresh eval problems per slice each cycle.")
    mined_share: float = Field(default=0.2, description="Share of corrected hard cases held out as the mined slice.")
    ngram_n: int | None = Field(default=None, description="n of the n-gram contamination check for text recipes "
                                "(whitespace tokens); unset: the recipe's (13; the words recipe's short prompts 6).")
    files: Annotated[tuple[str, ...], NoDecode] = Field(default=(), description="The team's eval files, "
                                                        "comma-separated fsspec URLs (JSONL, Parquet or CSV with "
                                                        "columns `input`, optional `target`, any metadata): sealed "
                                                        "once into the suite instead of a generated one.")
    slice_by: Annotated[tuple[str, ...], NoDecode] = Field(default=(), description="Metadata columns of the eval "
                                                           "files whose values make the slices (topic, language, "
                                                           "product), comma-separated; none: one slice 'all'.")
    held_out_share: float = Field(default=0.25, gt=0, lt=1, description="Share of each eval file's slice held out "
                                  "when it is sealed (frozen, by hash): the unseen set the leak signal compares the "
                                  "counted set with.")
    min_slice_items: int = Field(default=20, ge=1, description="Items an eval file's slice needs to be judged: a "
                                 "smaller one is refused, naming the slice.")
    scorer: str = Field(default="exact", description="How an answer is scored against its item: exact, normalized, "
                        "includes, regex, numeric, token_f1, judge, or 'module:function' of your own (score(input, "
                        "output, target, metadata) -> (value in [0, 1], explanation)).")

    _lists = field_validator("files", "slice_by", mode="before")(comma_list)


class Gate(Group):
    """The offline gate: a paired bootstrap of candidate against champion on the same items."""

    model_config = SettingsConfigDict(env_prefix="RMI_GATE_")

    min_gain: float = Field(default=0.0, description="The gain's lower confidence bound must exceed this.")
    slice_tolerance: float = Field(default=0.05, description="A slice falling more than this, significantly, blocks "
                                   "promotion.")
    confidence: float = Field(default=0.98, description="Two-sided level of the paired bootstrap intervals.")
    resamples: int = Field(default=2000, description="Bootstrap resamples.")
    leak_gap: float = Field(default=0.10, description="Public (or anchor) gain beyond the fresh-set gain that marks "
                            "a likely leak.")
    first_floor: float = Field(default=0.05, description="Score a first model needs with no champion.")


class Probes(Group):
    """Reward-hacking probes on every challenger: is its gain real, or a loophole of what it trained against?"""

    model_config = SettingsConfigDict(env_prefix="RMI_PROBE_")

    block: bool = Field(default=True, description="A probe that fires stops promotion (the candidate is tagged "
                        "suspected_reward_hack until a person promotes it with `rmi promote`); false: it only warns.")
    items: int = Field(default=300, ge=10, description="Questions each probe asks both models: fresh generated "
                       "tasks of the counted slices, else the eval file's counted items.")
    min_effect: float = Field(default=0.05, gt=0, le=1, description="How much larger the challenger's share of "
                              "flagged answers must be than the champion's for a probe to fire.")
    alpha: float = Field(default=0.01, gt=0, lt=1, description="One-sided level of each probe's sign test: the "
                         "share of honest challengers a probe may flag by chance.")
    length_ratio: float = Field(default=1.5, gt=1, description="Answers this many times longer than the "
                                "champion's, in words, make a judge's gain suspect unless it holds at equal length.")
    overlong: float = Field(default=3.0, gt=1, description="An answer this many times longer than its reference "
                            "(or the champion's answer) is overlong.")
    live_min_answers: int = Field(default=20, ge=1, description="Liked answers a version needs before users' likes "
                                  "of answers the audit fails are compared with the champion's.")


class Judge(Group):
    """A judge model: any OpenAI-compatible chat endpoint that grades answers pass or fail per criterion."""

    model_config = SettingsConfigDict(env_prefix="RMI_JUDGE_")

    url: str | None = Field(default=None, description="Base URL of the judge's OpenAI-compatible API "
                            "(http://host:port/v1); needed by the `judge` scorer.")
    model: str = Field(default="judge", description="Model name sent to the judge endpoint.")
    api_key: SecretStr | None = Field(default=None, repr=False, exclude=True, description="The judge endpoint's "
                                      "key. Never logged.")
    criteria: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("correct: the answer states the same facts as the reference answer",), description="The rubric, "
        "comma-separated 'name: what passing means' criteria; an answer passes when every criterion passes.")
    labels: Annotated[tuple[str, ...], NoDecode] = Field(default=(), description="Answers people labelled, to "
                                                         "measure the judge on beside users' thumbs: "
                                                         "comma-separated fsspec URLs of JSONL, CSV or Parquet with "
                                                         "columns `input`, `output`, `label` (pass or fail), "
                                                         "optional `target` and `slice`.")
    min_agreement: float = Field(default=0.7, ge=0, le=1, description="Least share of answers people rated on which "
                                 "the judge agrees with them; below it, promotion is blocked.")
    min_labels: int = Field(default=30, ge=1, description="Answers rated by people the judge's agreement needs "
                            "before it is trusted or blocks.")
    concurrency: int = Field(default=8, ge=1, description="Judge calls in flight at once.")
    timeout_seconds: float = Field(default=30.0, gt=0, description="Seconds a judge call may take.")
    retries: int = Field(default=3, ge=0, description="Retries of a judge call that timed out or answered badly.")
    input_price: float = Field(default=0.0, ge=0, description="Price per million prompt tokens, for the cost the "
                               "UI shows.")
    output_price: float = Field(default=0.0, ge=0, description="Price per million completion tokens.")

    _lists = field_validator("criteria", "labels", mode="before")(comma_list)
