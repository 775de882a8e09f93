"""The simulation's knobs: read by the simulated world and by `rmi run`, which starts it; never by the pipeline."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from .base import Group


class Simulation(Group):
    """The simulated users: how many ask, how often they rate, correct, leave an implicit signal, are wrong, or
    garble a line. The defaults are a production app's: most answers get no rating at all."""

    model_config = SettingsConfigDict(env_prefix="RMI_SIM_")

    queries_per_cycle: int = Field(default=6000, description="Questions users ask per cycle.")
    rating_share: float = Field(default=0.1, ge=0, le=1, description="Answers a user rates up or down (the monitor "
                                "reports malformed ones besides); deployed assistants get a few percent: "
                                "BlenderBot 3's public deployment had about 155,000 ratings on 6.2 million "
                                "utterances, some 5% of its messages (Xu et al. 2023, parl.ai/projects/bb3x).")
    correction_share: float = Field(default=0.05, ge=0, le=1, description="Thumbs-down on a wrong answer that "
                                    "carry the right answer: an assumption near what teams report (a written "
                                    "correction is far rarer than a thumb).")
    copy_share: float = Field(default=0.2, ge=0, le=1, description="Unrated answers a user takes for right and "
                              "copies: the app sends an implicit `copied` signal (an assumption).")
    ask_again_share: float = Field(default=0.3, ge=0, le=1, description="Unrated answers a user takes for wrong "
                                   "and asks again within a minute: a second question, and an implicit "
                                   "`asked_again` signal on the first answer (an assumption).")
    wrong_user_share: float = Field(default=0.05, ge=0, le=1, description="Users whose verdict is the wrong one, "
                                    "in ratings and implicit signals alike (a wrong answer copied now and then).")
    malformed_share: float = Field(default=0.002, description="Lines a buggy client garbles.")
    eval_like_share: float = Field(default=0.02, ge=0, le=1, description="Questions that reuse an eval item's text in "
                                   "another question (where the recipe has such variants: the words recipe), which "
                                   "the n-gram contamination check should keep out of training.")
    asserting_share: float = Field(default=0.0, ge=0, le=1, description="Users who assert a wrong answer in their "
                                   "question (the catalogue task: 'Someone told me it is $79.'), whom a model that "
                                   "learned to please agrees with: the population of the sycophancy probe. They rate "
                                   "by their belief, as real ones do: thumbs-up when the answer agrees with them, "
                                   "down when it does not, and their corrections are their wrong answer (the "
                                   "world's stats count them and how often the model agreed).")
