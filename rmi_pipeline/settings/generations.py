"""Smarter models train their successors: a new generation trained from scratch and a fast derivative, both taught by
the champion (ml/distill.py)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from .base import Group


class Teaching(Group):
    """How the champion teaches a model trained from scratch: its labels and its next-token distributions."""

    model_config = SettingsConfigDict(env_prefix="RMI_TEACH_")

    temperature: float = Field(default=2.0, gt=0, description="Temperature of the champion's next-token "
                               "distributions the student matches (higher: more of what it thinks second-best).")
    weight: float = Field(default=0.5, ge=0, description="Weight of matching those distributions beside the rows' "
                          "own loss; 0: labels only.")
    labels_per_slice: int = Field(default=500, ge=0, description="Prompts per slice the champion is reliable on (at "
                                  "least RMI_SATURATION right on the sealed eval) that it labels: fresh generated "
                                  "ones, or the training set's prompts where the recipe has no generator; with a "
                                  "verifier, as many of every other slice, of which the answers it accepts teach.")
    label_share: float = Field(default=0.3, ge=0, lt=1, description="Share of every training batch from those "
                               "labels.")


class Generations(Group):
    """A new generation: a model of another size or architecture trained from scratch on the training set and the
    champion's teaching (`rmi generation --size`), then gated, trialled and promoted like any challenger."""

    model_config = SettingsConfigDict(env_prefix="RMI_GENERATION_")

    size: str | None = Field(default=None, description="The size the automation trains a new generation at when the "
                             "champion's gains stall: one of the recipe's sizes, or a save_pretrained directory for "
                             "the Hugging Face recipe; unset: only `rmi generation` starts one.")
    steps: int = Field(default=3000, ge=1, description="Training steps of a new generation.")
    max_seconds: float = Field(default=1200.0, gt=0, description="Wall-clock cap of a new generation's training.")
    stall_cycles: int = Field(default=3, ge=1, description="Evaluations in a row whose gain over the champion stays "
                              "under RMI_GENERATION_STALL_GAIN: then the gains have stalled.")
    stall_gain: float = Field(default=0.01, ge=0, description="A gain under this does not count as progress.")
    budget: int = Field(default=1, ge=0, description="New generations the automation starts per champion (one the "
                        "gate turns down uses one up).")


class Derivative(Group):
    """A derivative for serving: a smaller student distilled from the champion that takes the alias `fast` when it
    keeps the champion's quality (a non-inferiority gate) and answers faster (measured)."""

    model_config = SettingsConfigDict(env_prefix="RMI_DERIVATIVE_")

    size: str | None = Field(default=None, description="The recipe's size of a derivative trained after each "
                             "promotion (arithmetic micro, words micro); unset: only `rmi derivative` starts one.")
    tolerance: float = Field(default=0.05, ge=0, lt=1, description="Share of the champion's score the derivative "
                             "may lose: on no counted slice more, and overall not beyond it at the gate's confidence.")
    min_speedup: float = Field(default=2.0, gt=0, description="How many times as many prompts per second as the "
                               "champion it must answer, measured in process on the eval's prompts.")
    steps: int = Field(default=12000, ge=1, description="Training steps of a derivative: a student a twentieth of "
                       "the champion's size needs more than the champion took (arithmetic micro: about 9,000).")
    max_seconds: float = Field(default=900.0, gt=0, description="Wall-clock cap of a derivative's training.")
