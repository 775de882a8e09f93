"""The simulation's knobs: read by the simulated world and by `rmi run`, which starts it; never by the pipeline."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from .base import Group


class Simulation(Group):
    """The simulated users: how many ask, how often they are wrong, correct, or garble a line."""

    model_config = SettingsConfigDict(env_prefix="RMI_SIM_")

    queries_per_cycle: int = Field(default=6000, description="Questions users ask per cycle.")
    wrong_user_share: float = Field(default=0.05, description="Users whose verdict is the wrong one.")
    correction_share: float = Field(default=0.6, description="Thumbs-down that carry the right answer.")
    malformed_share: float = Field(default=0.002, description="Lines a buggy client garbles.")
    eval_like_share: float = Field(default=0.02, ge=0, le=1, description="Questions that reuse an eval item's text in "
                                   "another question (where the recipe has such variants: the words recipe), which "
                                   "the n-gram contamination check should keep out of training.")
