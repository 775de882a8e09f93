"""Judging a candidate: the sealed eval suite and the promotion gate."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from .base import Group


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
