"""Users ask questions across skills and tiers, drifting toward harder ones, and react to the answers.

Most users judge an answer right; a share of them are wrong. Some thumbs-down carry the right answer
as a correction, some a comment; an automated monitor reports answers that are not in the form asked for.
Under a drift, a share of users all ask one slice (a skill at one tier) that they did not ask before.
"""

import random
from dataclasses import dataclass

from ..recipes.base import slice_name

EASIEST_CAP = 4  # in cycle c users ask up to tier EASIEST_CAP + c (digits, words...)


@dataclass
class Reactions:
    wrong_user_share: float
    correction_share: float
    comment_share: float = 0.3


@dataclass(frozen=True)
class Drift:
    """`share` of the questions ask `skill` at `tier`; the champion was right on `accuracy` of them at the start."""

    skill: str
    tier: int
    share: float
    accuracy: float

    @property
    def slice(self) -> str:
        return slice_name(self.skill, self.tier)


def usual_tiers(recipe, cycle: int) -> list[int]:
    """The tiers users ask in a cycle: up to EASIEST_CAP + cycle."""
    cap = min(max(recipe.tiers), EASIEST_CAP + cycle)
    return [t for t in recipe.tiers if t <= cap]


def questions(rng: random.Random, recipe, n: int, cycle: int, drift: Drift | None = None) -> list:
    if drift is None:
        return recipe.sample_tasks(rng, n, list(recipe.skills), usual_tiers(recipe, cycle))
    moved = round(n * drift.share)
    tasks = (recipe.sample_tasks(rng, n - moved, list(recipe.skills), usual_tiers(recipe, cycle))
             + recipe.sample_tasks(rng, moved, [drift.skill], [drift.tier]))
    rng.shuffle(tasks)
    return tasks


def react(rng: random.Random, task, completion: str, response_id: str, reactions: Reactions,
          well_formed: bool) -> dict:
    """A user's (or the monitor's) feedback on one answer, as an app sends it to the gateway's /v1/feedback;
    `well_formed`: whether the answer has the form of one (the monitor reports those that have not)."""
    right = completion == task.answer
    judged_right = right if rng.random() >= reactions.wrong_user_share else not right
    correction = comment = None
    source = "user"
    if not judged_right:
        if not well_formed:
            source = "report"
            comment = "automated check: the answer is not in the form asked for"
        elif not right and rng.random() < reactions.correction_share:
            correction = task.answer
        elif rng.random() < reactions.comment_share:
            comment = rng.choice(["wrong", "that's not right", "not quite", "almost"])
    return {"response_id": response_id, "rating": "up" if judged_right else "down", "correction": correction,
            "comment": comment, "source": source,
            "user_id": f"monitor-{rng.randrange(50)}" if source == "report" else None,
            "meta": {"client": rng.choice(["web", "ios", "android", "api"])}}
