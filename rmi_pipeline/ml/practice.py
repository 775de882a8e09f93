"""What a champion makes for its successor: harder problems it solved, RL groups, hinted successes, self-labels.

At the first tier each skill has not yet solved (the frontier) and `Practice.tiers` - 1 tiers past it, up to the
eval suite's top tier (its reach: curriculum.reach; a skill solved up to it practises nothing), the champion
gets generated problems and keeps the first sampled answer the recipe's verifier accepts; on those problems and on
its latest thumbs-down prompts it samples groups for RL; its failures get a second attempt with the verifier's
critique as a hint; and just past its reliable range (and, if that reaches the suite's top tier, at its own edge
past it) it labels problems itself, keeping only labels it backs up.
A source with no share in the training mix is not made. No ground truth is read but the verifier's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..settings import Practice, Sampling, SelfLabelling
from .curriculum import frontier, problems_at
from .hygiene import is_mined_holdout

SOURCES = ("practice", "rl", "hint_distill", "self_label")  # the training mix's sources made here
FRONTIER_PROBLEMS = 100  # generated problems per skill and tier that measure where the champion stands


@dataclass
class Practised:
    rows: list[dict] = field(default_factory=list)  # {"prompt", "target", "source"[, "scale", "reference"]}
    meta: dict = field(default_factory=dict)  # what was measured and made, for the UI
    failed_prompts: list[str] | None = None  # the prompts the coach saw fail (None: no coaching)


def retry_prompts(recipe, thumbs_down: list[str], mined_share: float, limit: int) -> list[str]:
    """The champion's latest distinct thumbs-down prompts it can be asked, newest first; those on the held-out side
    of the mined split are eval items, never practice."""
    usable = (p for p in thumbs_down if recipe.is_valid_prompt(p)
              and not is_mined_holdout(recipe.prompt_hash(p), mined_share))
    return list(dict.fromkeys(usable))[:limit]


def practise(recipe, model, mix: dict[str, float], failed: list[str], rng: random.Random, seed: int, *,
             practice: Practice, sampling: Sampling, self_labelling: SelfLabelling, saturation: float,
             reach: dict[str, int] | None = None) -> Practised:
    """Every source of SOURCES with a share in `mix`, from the champion `model` and its failed prompts; generated
    problems go up to `reach[skill]` (curriculum.reach; None: the recipe's hardest tier)."""
    from .rl import coach, rollouts
    from .self_label import self_label

    out = Practised()
    last = reach or {skill: recipe.hardest_tier for skill in recipe.skills}
    problems: list[str] = []
    if mix["practice"] or mix["rl"] or mix["hint_distill"]:
        tiers, accuracy = frontier(recipe, model, rng, FRONTIER_PROBLEMS, saturation, last)
        span = {skill: list(range(tier, min(tier + practice.tiers, last[skill] + 1)))
                for skill, tier in tiers.items()}  # empty for a skill solved up to its reach
        problems = [t.prompt for skill, tiers_of in span.items() if tiers_of for t in recipe.sample_tasks(
            rng, problems_at(practice.problems, tiers_of[-1]), [skill], tiers_of)]
        out.meta |= {f"frontier {s}": t for s, t in tiers.items()}
        out.meta |= {f"accuracy {s}": round(a, 3) for s, a in accuracy.items()}
        out.meta["practice_problems"] = len(problems)
    # practice and RL learn from the same sampled attempts: sampled once
    attempts = (recipe.sample(model, problems, sampling.rollouts, sampling.temperature, seed)
                if mix["practice"] or mix["rl"] else [])
    if mix["practice"]:  # harder tasks: keep the first sampled answer the verifier accepts
        for prompt, group in zip(problems, attempts, strict=True):
            right = next((a for a in group if recipe.verify(prompt, a)[0] == 1), None)
            if right is not None:
                out.rows.append({"prompt": prompt, "target": right, "source": "practice"})
        out.meta["practice_solved"] = len(out.rows)
    if mix["rl"]:
        groups = recipe.sample(model, failed, sampling.rollouts, sampling.temperature, seed + 1) + attempts
        ro = rollouts(recipe, failed + problems, groups)
        out.rows += [{**r, "source": "rl"} for r in ro.rows]
        out.meta |= {"rl_prompts": ro.prompts, "rl_informative_groups": ro.informative_groups,
                     "rl_solved_share": round(ro.solved_share, 4)}
    if mix["hint_distill"]:
        co = coach(recipe, model, failed + problems, sampling.temperature, seed + 2)
        out.rows += [{**r, "source": "hint_distill"} for r in co.rows]
        out.meta |= {"coach_failed": co.failed, "coach_hinted": co.hinted, "coach_solved_with_hint":
                     co.solved_with_hint, "coach_solved_without_hint": co.solved_without_hint}
        out.failed_prompts = co.failed_prompts
    if mix["self_label"]:
        sl = self_label(recipe, model, rng, self_labelling, seed + 3, last, tiers=practice.tiers,
                        temperature=sampling.temperature, saturation=saturation)
        out.rows += [{**r, "source": "self_label"} for r in sl.rows]
        out.meta |= {"self_labels": len(sl.rows), **{f"self_labels {st}": n for st, n in sl.kept.items()}}
    return out
