"""Harder tasks as the model improves: find, per skill, the first tier the model has not yet saturated.

The frontier is measured on fresh generated problems (the generator knows their answers), never on eval items.
Practice starts at the frontier, one step past the tiers the model already solves (RMI_PRACTICE_TIERS say how many).
The eval suite grows the same way, ahead of the champion: `suite_growth` says which tiers it must seal next.
"""

from __future__ import annotations

import random

from .tasks import slice_name

GROWTH_PER_CYCLE = 6  # tiers the eval suite may add per skill in one cycle
HEADROOM = 0.5  # a slice a model answers less than half right still measures its next improvement
HORIZON = HEADROOM / 2  # a horizon slice is the first tier past the suite where the champion is right this seldom
FAR = 8  # and a second one this many times further out, which keeps the headroom through a long jump
FULL_COUNT_TIER = 10  # past this tier, fewer problems are made, in proportion (problems_at)
FEWEST = 30  # problems that measure a long tier (of `n` asked, if fewer): see measured_at
LOOKS = 3  # a probe asks its problems in this many parts, the next only while its outcome is still open
SEARCH_WITHIN = 0.02  # searches past the suite halve to within this share of a tier: at 700, to 14 tiers; at 50, 1


def problems_at(n: int, tier: int) -> int:
    """How many of `n` asked problems to make at `tier`: all up to FULL_COUNT_TIER, past it fewer in proportion, so a
    tier's problems hold about as many answer tokens however long they are. Decoding is quadratic in length (in
    the arithmetic recipe a 70-digit sum costs about 28 times an 8-digit one, bench/decoding.py)."""
    return max(1, n * min(tier, FULL_COUNT_TIER) // max(tier, 1))


def measured_at(n: int, tier: int) -> int:
    """problems_at, but never under FEWEST (or `n`): what measures a tier, to find an edge or to seal a slice the
    gate counts. Every slice weighs the same in the gate, so a slice of a few items would move the gain as much as
    a full one while measuring far less. 27 of 30 right is the 0.9 edge."""
    return max(min(n, FEWEST), problems_at(n, tier))


def horizon_problems(n: int, tier: int, far: bool) -> int:
    """How many of `n` problems a horizon slice holds, sealed or refreshed: measured_at, but a far one problems_at's
    few: both models nearly always fail it, and its problems are the suite's longest, the costliest to decode."""
    return (problems_at if far else measured_at)(n, tier)


def share_right(judge, items: list, at: float, looks: int = LOOKS) -> float:
    """The share of `items` that `judge(part)` (a boolean each) passes, of those asked: a `looks`-th of them at a
    time, until the share over all of them is sure to reach `at` or sure not to. Far from an edge a probe is
    decided by its first third (bench/edge_search.py compares an edge search that probes so with whole probes)."""
    right = asked = 0
    for look in range(looks):
        part = items[asked:len(items) * (look + 1) // looks]
        if not part:
            continue
        right, asked = right + sum(judge(part)), asked + len(part)
        if right / len(items) >= at or (right + len(items) - asked) / len(items) < at:
            break
    return right / asked


def first_unsolved(solves, first: int, last: int, within: float = 0.0) -> int:
    """The first tier in first..last where `solves(tier)` is false (last + 1 if none), probed at doubling steps
    and then by halving, as accuracy falls with the tier: a model that solves 80 tiers is asked at about a dozen,
    not 80, of ever longer problems. `within` > 0 stops halving once the tiers left between a solved and an
    unsolved one are at most that share of the solved one's; the result is then the first tier past it."""
    known, step = first - 1, 1  # every tier up to `known` is taken as solved
    while True:
        probe = min(known + step, last)
        if probe <= known:
            return last + 1
        if not solves(probe):
            break
        known, step = probe, step * 2
    while probe - known > max(1, within * known):
        middle = (known + probe) // 2
        known, probe = (middle, probe) if solves(middle) else (known, middle)
    return probe if probe - known <= 1 else known + 1


def reach(recipe, slices: list[dict]) -> dict[str, int]:
    """{skill: the hardest tier worth practising}: the eval suite's top tier (the manifest's `slices`, horizon slices
    aside), which grows ahead of the champion. Past it the gate sees only horizon slices, and the problems there
    cost the most to make and to train on."""
    top = {s: max((int(x["tier"]) for x in slices if x["skill"] == s and not x.get("horizon")),
                  default=recipe.hardest_tier) for s in recipe.skills}
    return {s: min(t, recipe.hardest_tier) for s, t in top.items()}


def frontier(recipe, model, rng: random.Random, per_tier: int, saturation: float,
             last: dict[str, int]) -> tuple[dict, dict]:
    """({skill: practice tier}, {"skill/tier": accuracy}) for the tiers measured on the way up to `last[skill]`;
    a skill solved up to it gets last + 1 (it practises nothing): nothing is left there that the gate could see, and
    its longest problems cost the most to make and to train on."""
    tiers, accuracy = {}, {}
    for skill in recipe.skills:
        def solves(tier: int, skill: str = skill) -> bool:
            tasks = recipe.sample_tasks(rng, per_tier, [skill], [tier])
            accuracy[slice_name(skill, tier)] = sum(recipe.correct(model, tasks)) / len(tasks)
            return accuracy[slice_name(skill, tier)] >= saturation

        tiers[skill] = first_unsolved(solves, recipe.tiers[0], last[skill])
    return tiers, accuracy


def horizon(recipe, correct, skill: str, above: int, rng: random.Random, per_tier: int,
            scores: dict, at: float = HORIZON, last: int | None = None) -> tuple[int, list, int] | None:
    """(tier, its problems, the highest tier probed below it that holds): the first tier past `above` found where
    the model answers fewer than `at` of fresh problems, at doubling steps and then by halving to within
    SEARCH_WITHIN of the tier, so a search far out costs a few probes near the reach, not one per halving (scores
    go into `scores`), or None up to `last` (the recipe's hardest). measured_at of `per_tier` are drawn at each
    tier probed: the gate counts the slice. Probes are scored in parts (share_right); at HORIZON a tier is only
    found failing once all its problems are scored, so the slice sealed from it is whole (edge_slice searches at
    saturation, and seals fresh problems)."""
    drawn, shares = {}, {}

    def holds(tier: int) -> bool:
        drawn[tier] = recipe.build_eval_suite(rng, measured_at(per_tier, tier),
                                              {s: [tier] if s == skill else [] for s in recipe.skills})
        shares[tier] = scores[slice_name(skill, tier)] = share_right(correct, drawn[tier], at)
        return shares[tier] >= at

    first_unsolved(holds, above + 1, recipe.hardest_tier if last is None else last, within=SEARCH_WITHIN)
    failing = [t for t, share in shares.items() if share < at]
    if not failing:
        return None
    tier = min(failing)
    return tier, drawn[tier], max((t for t, share in shares.items() if t < tier and share >= at), default=above)


def suite_growth(recipe, correct, items: list[dict], saturation: float, lead: int, rng: random.Random,
                 per_tier: int) -> tuple[list[dict], dict, dict]:
    """(new eval items, {skill: tiers they add}, {"skill/tier": the model's score}), where `correct(tasks)` says which
    tasks the model answers right (scored.Remembered: what it answered before is not decoded again): what keeps
    `lead` tiers in the suite past the highest the model solves (`saturation`), and one slice it still fails. The
    suite's top `lead` tiers of each skill are scored on its own items, hardest first; when the model solves the top
    one, the next tiers are drawn and scored one at a time while it solves them (a champion may climb many tiers in
    a cycle), at most GROWTH_PER_CYCLE tiers past the top and up to the recipe's hardest: a champion far past the
    suite is followed over several cycles, so the eval's cost grows by a bounded step. A model that generalizes
    further than that still answers the suite's hardest slice at HORIZON or better, and then two horizon slices are
    sealed past it (items marked "horizon"): the first tier it answers under HORIZON, and FAR times that tier
    (marked "far"). When the model answers every horizon slice short of a far one, a near one is sealed again past
    them. Counted by the gate, so the next gain out there shows, but not tiers practice reaches or the suite grows
    from. And where the model solves past every slice it solves, an edge slice (marked "horizon" and "edge") is
    sealed at its reach (edge_slice)."""
    from .tasks import Task

    by_slice: dict[tuple[str, int], list[Task]] = {}
    for item in items:
        by_slice.setdefault((item["skill"], int(item["tier"])), []).append(
            Task(item["prompt"], item["answer"], item["skill"], int(item["tier"])))
    dense = {(i["skill"], int(i["tier"])) for i in items if not i.get("horizon")}
    far = {(i["skill"], int(i["tier"])) for i in items if i.get("far")}
    new, grow, scores = [], {}, {}

    def solves(skill: str, tier: int, tasks: list[Task], at: float = saturation) -> bool:
        if slice_name(skill, tier) not in scores:
            scores[slice_name(skill, tier)] = sum(correct(tasks)) / len(tasks)
        return scores[slice_name(skill, tier)] >= at

    def draw(skill: str, tiers: list[int]) -> list[Task]:
        tasks = recipe.build_eval_suite(rng, per_tier, {s: tiers if s == skill else [] for s in recipe.skills})
        for task in tasks:
            by_slice.setdefault((skill, task.tier), []).append(task)
        new.extend(vars(t) for t in tasks)
        return tasks

    for skill in recipe.skills:
        top = max(t for s, t in dense if s == skill)
        solved = next((t for t in range(top, max(top - lead, 0), -1)
                       if (skill, t) in by_slice and solves(skill, t, by_slice[(skill, t)])), None)
        if solved is not None:
            drawn, ceiling = top, min(top + GROWTH_PER_CYCLE, recipe.hardest_tier)
            while solved == drawn < ceiling:
                drawn += 1
                by_slice.pop((skill, drawn), None)  # a horizon slice there is scored again with the new items
                scores.pop(slice_name(skill, drawn), None)
                if solves(skill, drawn, draw(skill, [drawn])):
                    solved = drawn
            last = min(solved + lead, ceiling)
            draw(skill, list(range(drawn + 1, last + 1)))
            grow[skill] = list(range(top + 1, last + 1))
        hardest = max(t for s, t in by_slice if s == skill)
        horizons = sorted(t for s, t in by_slice if s == skill and (s, t) not in dense and t not in grow.get(s, []))
        failing = [t for t in horizons if not solves(skill, t, by_slice[(skill, t)], at=HORIZON)]
        if failing:
            # past a near slice it now answers, only the far one is left, and nothing measures the gains between
            # them: a near slice again, just past what it answers
            passed = [t for t in horizons if t < failing[0]]
            found = horizon(recipe, correct, skill, passed[-1], rng, per_tier, scores) \
                if (skill, failing[0]) in far and passed else None
            if found is not None and found[0] < failing[0]:
                new.extend({**vars(t), "horizon": True} for t in found[1])
                grow[skill] = grow.get(skill, []) + [found[0]]
            continue
        if not solves(skill, hardest, by_slice[(skill, hardest)], at=HORIZON):
            continue
        found = horizon(recipe, correct, skill, hardest, rng, per_tier, scores)
        if found is None:
            continue
        tier, tasks, _ = found
        new.extend({**vars(t), "horizon": True} for t in tasks)
        far_tier = min(FAR * tier, recipe.hardest_tier)
        if far_tier > tier:  # a cycle may carry a champion far past `tier`: a second slice keeps the headroom
            further = recipe.build_eval_suite(rng, horizon_problems(per_tier, far_tier, far=True),
                                              {s: [far_tier] if s == skill else [] for s in recipe.skills})
            solves(skill, far_tier, further)
            new.extend({**vars(t), "horizon": True, "far": True} for t in further)
        grow[skill] = grow.get(skill, []) + sorted({tier, far_tier})
    for skill in recipe.skills:
        dense_now = {t for s, t in dense if s == skill} | {
            int(i["tier"]) for i in new if i["skill"] == skill and not i.get("horizon")}
        tiers = sorted({t for s, t in by_slice if s == skill} | {int(i["tier"]) for i in new if i["skill"] == skill})
        edge = edge_slice(recipe, correct, skill, max(dense_now), tiers, saturation, rng, per_tier, scores)
        if edge:
            new.extend({**vars(t), "horizon": True, "edge": True} for t in edge)
            grow[skill] = sorted(grow.get(skill, []) + [edge[0].tier])
    return new, {s: ts for s, ts in grow.items() if ts}, scores


def edge_slice(recipe, correct, skill: str, dense_top: int, tiers: list[int], saturation: float, rng: random.Random,
               per_tier: int, scores: dict) -> list | None:
    """measured_at problems at the highest tier the model solves (at `saturation`), when it solves the top dense
    tier and the slices past it up to some slice (`tiers`, scored in `scores`) and fresh problems past that one too:
    else no slice sees its reach, and the gate could promote a candidate that reaches less far on a small gain
    elsewhere."""
    below = None
    for tier in (t for t in tiers if t >= dense_top):
        if scores.get(slice_name(skill, tier), 0.0) < saturation:
            break
        below = tier
    if below is None:
        return None  # its reach is within the dense tiers, a slice each
    near = min((t for t in tiers if t > below), default=recipe.hardest_tier + 1)
    found = horizon(recipe, correct, skill, below, rng, per_tier, scores, at=saturation, last=near - 1)
    edge = near - 1 if found is None else found[2]
    if edge <= below:
        return None
    tasks = recipe.build_eval_suite(rng, measured_at(per_tier, edge),
                                    {s: [edge] if s == skill else [] for s in recipe.skills})
    scores[slice_name(skill, edge)] = sum(correct(tasks)) / len(tasks)
    return tasks
