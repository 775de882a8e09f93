"""Self-labelling: the model answers problems just past its reliable range, and keeps the answers it can back up.

No ground truth is used. A tier is reliable while the model's greedy answer and its sampled votes agree on at
least `saturation` of `probe` problems (the edge found by doubling steps and halving, curriculum.first_unsolved);
labels come from the first tier that is not and the `tiers` - 1 past it. A model reliable at every tier up to a
bound short of the recipe's hardest (the eval suite's top tier) labels the top `tiers` tiers below it: agreeing with
itself is not being right, and a champion that labelled nothing there would leave each cycle the same rejected
candidate. It also labels at its own edge past that bound (`past_suite`): a champion that solves far past the
suite's dense tiers learns nothing new from labels below them.
Where the recipe gives checks (problems a right answer implies, like c - b = a for a + b = c), a label is the first
of the greedy answer and the distinct votes that passes the format filter and whose checks the model answers as
expected: votes alone keep a wrong answer the model is sure of (measured precision 0.66-0.83 one tier past the
seed set), working back from it keeps 0.99 right. Without checks, every vote must agree with the greedy answer.
Where the recipe gives a route (another way to the same answer, through other problems drawn afresh), the model
must walk it to the label too: working back meets the model's own slips again, so checks keep labels only about as
right as its greedy answers, while a route asks about other problems (arithmetic at 34 digits: labels 0.995 and
1.000 right with the route, 0.93-0.95 with checks alone; the route keeps three in four).
Past the suite the edge is found to within SEARCH_WITHIN of it, and a probe stops once the problems asked show it
cannot be reliable (agreement_at): where a champion reaches far past the suite, that search, not the labelling, is
most of practice (bench/edge_search.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..settings import SelfLabelling
from .curriculum import FEWEST, LOOKS, SEARCH_WITHIN, first_unsolved, measured_at, problems_at, share_right
from .tasks import slice_name


@dataclass
class SelfLabels:
    rows: list[dict] = field(default_factory=list)  # {"prompt", "target"}
    tiers: dict = field(default_factory=dict)  # skill -> the first tier labelled
    agreement: dict = field(default_factory=dict)  # "skill/tier" -> share of problems whose votes all agreed
    kept: dict = field(default_factory=dict)  # "skill/tier" -> labels kept there
    past: dict = field(default_factory=dict)  # skill -> the first tier labelled past `last` (options.past_suite)


def self_label(recipe, model, rng: random.Random, options: SelfLabelling, seed: int,
               last: dict[str, int] | None = None, probe: int = 100, *, tiers: int, temperature: float,
               saturation: float) -> SelfLabels:
    """`probe` problems per tier (curriculum.measured_at: fewer past FULL_COUNT_TIER, at least FEWEST) find the edge of
    the reliable range up to `last[skill]` (None: the recipe's hardest tier); `options.problems` (fewer past
    FULL_COUNT_TIER too) are labelled at each of `tiers` tiers from it, up to `last`, and as many from
    the edge past `last` where the model is reliable up to it (`options.past_suite`)."""
    per_tier, votes = options.problems, options.votes
    out = SelfLabels()
    last = last or {skill: recipe.hardest_tier for skill in recipe.skills}
    for skill in recipe.skills:
        def reliable(tier: int, skill: str = skill) -> bool:
            out.agreement[slice_name(skill, tier)] = agreement_at(
                recipe, model, rng, skill, tier, measured_at(probe, tier), seed, votes=votes, temperature=temperature,
                saturation=saturation)
            return out.agreement[slice_name(skill, tier)] >= saturation

        def label(tier: int, n: int, skill: str = skill) -> list[dict]:
            return _routed(recipe, model, rng, _backed_up(recipe, model, *_answers(
                recipe, model, rng, skill, tier, n, votes, temperature, seed + 1)))

        edge = first_unsolved(reliable, recipe.tiers[0], last[skill])
        if edge > last[skill]:
            if last[skill] >= recipe.hardest_tier:
                continue  # reliable at every tier the recipe has: nothing past it to label
            edge = max(recipe.tiers[0], last[skill] - tiers + 1)
            if options.past_suite:
                past = first_unsolved(reliable, last[skill] + 1, recipe.hardest_tier, within=SEARCH_WITHIN)
                if past <= recipe.hardest_tier:
                    out.past[skill] = past
        out.tiers[skill] = edge
        past = out.past.get(skill)
        for tier in [*range(edge, min(edge + tiers, last[skill] + 1)),
                     *(range(past, min(past + tiers, recipe.hardest_tier + 1)) if past else ())]:
            # past `last`, a tier whose first FEWEST problems keep no label is left: a model sure of answers it cannot
            # back up labels nothing there, and those problems cost the most
            n = problems_at(per_tier, tier)
            first = min(FEWEST, n) if tier > last[skill] else n
            labels = label(tier, first)
            labels += label(tier, n - first) if labels and n > first else []
            out.kept[slice_name(skill, tier)] = len(labels)
            out.rows += labels
    return out


def agreement_at(recipe, model, rng: random.Random, skill: str, tier: int, n: int, seed: int, *, votes: int,
                 temperature: float, saturation: float, looks: int = LOOKS) -> float:
    """The share of `n` fresh problems of a tier whose votes all agree with the greedy answer, of those asked
    (curriculum.share_right): far past its edge a model disagrees with itself on most of the first third."""
    prompts = [t.prompt for t in recipe.sample_tasks(rng, n, [skill], [tier])]
    return share_right(lambda part: _votes(recipe, model, part, votes, temperature, seed + tier)[-1],
                       prompts, saturation, looks)


def _answers(recipe, model, rng, skill, tier, n, votes, temperature, seed):
    """n fresh problems of a tier (their true answers unused), the greedy answers, the votes, and whether all agree."""
    prompts = [t.prompt for t in recipe.sample_tasks(rng, n, [skill], [tier])]
    return prompts, *_votes(recipe, model, prompts, votes, temperature, seed + tier)


def _votes(recipe, model, prompts, votes, temperature, seed):
    """The greedy answers, the votes, and whether all agree (and are plausible)."""
    greedy = recipe.answer(model, prompts)
    samples = recipe.sample(model, prompts, votes, temperature, seed)
    agreed = [all(s == g for s in group) and recipe.plausible(p, g)
              for p, g, group in zip(prompts, greedy, samples, strict=True)]
    return greedy, samples, agreed


def _backed_up(recipe, model, prompts, greedy, samples, agreed) -> list[dict]:
    """The labels kept at one tier: checked by the model's own answers where the recipe has checks."""
    candidates = [[a for a in dict.fromkeys([g, *group]) if recipe.plausible(p, a)]
                  for p, g, group in zip(prompts, greedy, samples, strict=True)]
    checks = [[recipe.checks(p, a) for a in answers] for p, answers in zip(prompts, candidates, strict=True)]
    if not any(c for per_prompt in checks for c in per_prompt):  # a recipe without checks: unanimous votes
        return [{"prompt": p, "target": g} for p, g, ok in zip(prompts, greedy, agreed, strict=True) if ok]
    replies = iter(recipe.answer(model, [q for per_prompt in checks for c in per_prompt for q, _ in c]))
    rows = []
    for prompt, answers, per_prompt in zip(prompts, candidates, checks, strict=True):
        passed = [bool(c) and all([next(replies) == want for _, want in c]) for c in per_prompt]
        label = next((a for a, ok in zip(answers, passed, strict=True) if ok), None)
        if label is not None:
            rows.append({"prompt": prompt, "target": label})
    return rows


def _routed(recipe, model, rng: random.Random, rows: list[dict]) -> list[dict]:
    """The labels the model also reaches by the recipe's route, drawn afresh per problem (all of them where the
    recipe has no route)."""
    routes = [recipe.route(row["prompt"], rng) for row in rows]
    if not any(routes):
        return rows
    first = iter(recipe.answer(model, [q for route in routes if route for q in route[0]]))
    last = [route[1]([next(first) for _ in route[0]]) if route else None for route in routes]
    replies = iter(recipe.answer(model, [q for q in last if q is not None]))
    return [row for row, route, question in zip(rows, routes, last, strict=True)
            if route is None or (question is not None and next(replies) == row["target"])]
