"""Self-labelling: the model answers problems just past its reliable range, and keeps the answers it agrees on.

No ground truth is used. A tier is reliable while the model's greedy answer and its sampled votes agree on at
least `saturation` of the problems; labels come from the first tier that is not, and a label is kept only when
every vote agrees with the greedy answer and the answer passes the recipe's format and length filter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class SelfLabels:
    rows: list[dict] = field(default_factory=list)  # {"prompt", "target"}
    tiers: dict = field(default_factory=dict)  # skill -> the tier labelled
    agreement: dict = field(default_factory=dict)  # "skill/tier" -> share of problems whose votes all agreed
    asked: int = 0


def self_label(recipe, model, rng: random.Random, per_tier: int, votes: int, temperature: float,
               saturation: float, seed: int) -> SelfLabels:
    out = SelfLabels()
    for skill in recipe.skills:
        for tier in recipe.tiers:
            prompts = [t.prompt for t in recipe.sample_tasks(rng, per_tier, [skill], [tier])]  # answers unused
            greedy = recipe.answer(model, prompts)
            samples = recipe.sample(model, prompts, votes, temperature, seed + tier)
            agreed = [all(s == g for s in group) and recipe.plausible(p, g)
                      for p, g, group in zip(prompts, greedy, samples, strict=True)]
            out.agreement[f"{skill}/{tier}"] = sum(agreed) / len(prompts)
            out.asked += len(prompts)
            if out.agreement[f"{skill}/{tier}"] < saturation:  # one tier past the reliable range: label it
                out.tiers[skill] = tier
                out.rows += [{"prompt": p, "target": g} for p, g, ok in zip(prompts, greedy, agreed, strict=True)
                             if ok]
                break
    return out
