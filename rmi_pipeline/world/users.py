"""Users ask questions across skills and tiers, drifting toward harder ones, and react to the answers.

As in production, most answers get no rating: a share are rated up or down, and a few thumbs-down carry the right
answer as a correction, some a comment. Of the rest, some leave an implicit signal where an app would see one: a
user who takes an answer for right copies it, one who takes it for wrong asks again within a minute. A share of
users judge wrongly, in ratings and signals alike. An automated monitor reports the answers that are not in the form
asked for, rated or not. Under a drift, a share of users all ask one slice (a skill at one tier) that they did not
ask before.
"""

import random
from dataclasses import dataclass

from ..recipes.base import slice_name

EASIEST_CAP = 4  # in cycle c users ask up to tier EASIEST_CAP + c (digits, words...)
ASKED_AGAIN, COPIED = "asked_again", "copied"  # the implicit signals, as `meta.signal` of a feedback unrated
CLIENTS = ("web", "ios", "android", "api")


@dataclass
class Reactions:
    """How users react to an answer (settings.Simulation): the shares that rate, correct, copy, ask again, err."""

    wrong_user_share: float
    correction_share: float
    rating_share: float = 1.0
    copy_share: float = 0.0
    ask_again_share: float = 0.0
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


class RecipeTask:
    """What users ask when the recipe makes the tasks (arithmetic, words): its problems, drifting toward harder
    tiers, right when exactly its answer. Another task the world runs (world/catalogue) answers the same calls."""

    tags_topic = False  # the slice of a question is the recipe's to find

    def __init__(self, recipe):
        self.recipe = recipe

    def questions(self, rng: random.Random, n: int, cycle: int, drift: Drift | None = None) -> list:
        return questions(rng, self.recipe, n, cycle, drift)

    @staticmethod
    def is_right(task, completion: str) -> bool:
        return completion == task.answer

    def belief(self, task, completion: str) -> tuple:
        """What the user rates by: the truth (no one asserts an answer to a recipe's problem)."""
        return task, self.is_right(task, completion)

    def well_formed(self, completion: str) -> bool:
        return self.recipe.is_valid_completion(completion)


def questions(rng: random.Random, recipe, n: int, cycle: int, drift: Drift | None = None) -> list:
    if drift is None:
        return recipe.sample_tasks(rng, n, list(recipe.skills), usual_tiers(recipe, cycle))
    moved = round(n * drift.share)
    tasks = (recipe.sample_tasks(rng, n - moved, list(recipe.skills), usual_tiers(recipe, cycle))
             + recipe.sample_tasks(rng, moved, [drift.skill], [drift.tier]))
    rng.shuffle(tasks)
    return tasks


def react(rng: random.Random, task, completion: str, response_id: str, reactions: Reactions,
          well_formed: bool, right: bool | None = None) -> dict | None:
    """A user's (or the monitor's) feedback on one answer, as an app sends it to the gateway's /v1/feedback, or None
    when the user leaves none; `well_formed`: whether the answer has the form of one (the monitor reports those that
    have not); `right`: whether it is (default: it is the task's answer exactly). A rating first, else an implicit
    signal (rating null, `meta.signal`), else silence."""
    right = completion == task.answer if right is None else right
    judged_right = right if rng.random() >= reactions.wrong_user_share else not right
    reported = not judged_right and not well_formed
    if reported or _chance(rng, reactions.rating_share):
        return _rating(rng, task, response_id, reactions, right, judged_right, reported)
    if judged_right and _chance(rng, reactions.copy_share):
        signal = COPIED
    elif not judged_right and _chance(rng, reactions.ask_again_share):
        signal = ASKED_AGAIN
    else:
        return None
    return {"response_id": response_id, "rating": None, "correction": None, "comment": None, "source": "user",
            "user_id": None, "meta": {"signal": signal, "client": rng.choice(CLIENTS)}}


def _rating(rng: random.Random, task, response_id: str, reactions: Reactions, right: bool, judged_right: bool,
            reported: bool) -> dict:
    """Thumbs up or down as the user judged it; a thumbs-down on a wrong answer carries its correction now and
    then, or a comment; the monitor's report says what it checked."""
    correction = comment = None
    if reported:
        comment = "automated check: the answer is not in the form asked for"
    elif not judged_right:
        if not right and rng.random() < reactions.correction_share:
            correction = task.answer
        elif rng.random() < reactions.comment_share:
            comment = rng.choice(["wrong", "that's not right", "not quite", "almost"])
    return {"response_id": response_id, "rating": "up" if judged_right else "down", "correction": correction,
            "comment": comment, "source": "report" if reported else "user",
            "user_id": f"monitor-{rng.randrange(50)}" if reported else None,
            "meta": {"client": rng.choice(CLIENTS)}}


def _chance(rng: random.Random, share: float) -> bool:
    """True for `share` of the draws; a share of 0 or 1 draws nothing, so a world that rates every answer draws the
    same numbers as before the shares existed (its runs keep their figures)."""
    return share >= 1 or (share > 0 and rng.random() < share)
