"""Harder tasks as the model improves: find, per skill, the first tier the model has not yet saturated.

The frontier is measured on fresh generated problems (the generator knows their answers), never on eval items.
Practice starts at the frontier, one step past the tiers the model already solves (RMI_PRACTICE_TIERS say how many).
"""

from __future__ import annotations

import random

from .tasks import slice_name


def frontier(recipe, model, rng: random.Random, per_tier: int, saturation: float) -> tuple[dict, dict]:
    """({skill: practice tier}, {"skill/tier": accuracy}) for the tiers measured on the way up.

    A skill whose every tier is saturated practises its hardest tier."""
    tiers, accuracy = {}, {}
    for skill in recipe.skills:
        tiers[skill] = recipe.tiers[-1]
        for tier in recipe.tiers:
            tasks = recipe.sample_tasks(rng, per_tier, [skill], [tier])
            score = sum(recipe.correct(model, tasks)) / len(tasks)
            accuracy[slice_name(skill, tier)] = score
            if score < saturation:
                tiers[skill] = tier
                break
    return tiers, accuracy
