"""Models scored on the eval sets, per slice: what the gate compares and what the health check watches.

A slice 'skill/tier' pools the frozen anchor, the tiers the suite grew past it and this cycle's refreshed set;
'mined/skill' holds the mined hard cases of a skill. The public set and the anchor against the unseen sets make the
leak pairs, on the anchor's slices (the grown tiers are harder, and no public item is of them).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .gate import Paired
from .tasks import Task, slice_name

SEALED = ("anchor", "grown")  # the suite's fixed items: the slices it has
POOLED = (*SEALED, "refreshed")
MINED = "mined"


class Remembered:
    """One model's score on each eval item, kept between evaluations: a champion answers the same sealed items every
    cycle (and answered them the cycle before, as the challenger), and decoding the suite's long slices (or a judge's
    calls) is most of an evaluation, so only the items it has not been scored on yet are answered."""

    def __init__(self, recipe, load: Callable[[], Any], known: dict[str, float] | None = None, scorer=None):
        """`load()`: the model, loaded only if some item asked is not remembered; `scorer`: how an answer is scored
        (rmi_pipeline.scoring.scorers; None: exact match through the recipe)."""
        self.recipe, self._load, self.scorer = recipe, load, scorer
        self.known = {k: float(v) for k, v in (known or {}).items()}
        self.asked: set[str] = set()
        self.decoded = 0  # items this model answered here, not from memory

    @cached_property
    def model(self):
        return self._load()

    def scores(self, tasks: list[Task]) -> list[float]:
        """The model's score in [0, 1] on each task (1.0 or 0.0 under exact match)."""
        keys = [item_key(t) for t in tasks]
        todo = {k: t for k, t in zip(keys, tasks, strict=True) if k not in self.known}
        if todo:
            self.known.update(zip(todo, score(self.recipe, self.model, list(todo.values()), self.scorer),
                                  strict=True))
            self.decoded += len(todo)
        self.asked.update(keys)
        return [self.known[k] for k in keys]


def score(recipe, model, tasks: list[Task], scorer=None) -> list[float]:
    """The model answers the tasks and each answer is scored: by the recipe's exact match, or by `scorer`."""
    if scorer is None:
        return [float(right) for right in recipe.correct(model, tasks)]
    from ..scoring.contract import ScoreRequest

    answers = recipe.answer(model, [t.prompt for t in tasks])
    return [value for value, _ in scorer.score_many(
        [ScoreRequest(t.prompt, answer, t.answer, t.metadata) for t, answer in zip(tasks, answers, strict=True)])]


def item_key(task: Task) -> str:
    """An eval item by its exact prompt and expected answer."""
    return hashlib.blake2b(f"{task.prompt}\0{task.answer}".encode(), digest_size=8).hexdigest()


def eval_tasks(sets: dict[str, list[dict]]) -> list[tuple[str, Task]]:
    """(set name, task) for every item of every set, in order."""
    return [(name, Task(i["prompt"], i["answer"], i["skill"], None if i["tier"] is None else int(i["tier"]),
                        i.get("metadata") or {})) for name, items in sets.items() for i in items]


@dataclass
class Scored:
    """Per-item scores in [0, 1] (exact match: 1.0 right, 0.0 wrong) of one or two models on the same tasks:
    [challenger, champion]."""

    tasks: list[tuple[str, Task]]
    right: list[np.ndarray]

    def paired(self, keep) -> Paired:
        return self._pair([i for i, (name, task) in enumerate(self.tasks) if keep(name, task)])

    def _pair(self, idx: list[int]) -> Paired:
        return Paired(self.right[0][idx], self.right[1][idx] if len(self.right) > 1 else None)

    @cached_property
    def _groups(self) -> dict[tuple[str, str, int], list[int]]:
        """Item positions by (set, skill, tier), in order: a slice is found once, not by a pass over every item."""
        groups: dict[tuple[str, str, int], list[int]] = defaultdict(list)
        for i, (name, task) in enumerate(self.tasks):
            groups[(name, task.skill, task.tier)].append(i)
        return groups

    def _items(self, names, skill: str, tier: int | None = None) -> list[int]:
        return sorted(i for (n, s, t), idx in self._groups.items() if n in names and s == skill and tier in (None, t)
                      for i in idx)

    def slices(self) -> dict[str, Paired]:
        """Every slice of the suite (anchor, grown and refreshed pooled), then each skill's mined hard cases."""
        sealed = sorted({(s, t) for n, s, t in self._groups if n in SEALED})
        out = {slice_name(s, t): self._pair(self._items(POOLED, s, t)) for s, t in sealed}
        for skill in sorted({s for n, s, _ in self._groups if n == MINED}):
            out[slice_name(MINED, skill)] = self._pair(self._items((MINED,), skill))
        return out

    def leak_pairs(self, private: set[tuple[str, int]]) -> dict[str, tuple[Paired, Paired]]:
        """(a set the challenger could have seen, a set it cannot have) per leak signal."""
        private = private & self._anchor_slices()
        is_private = lambda task: (task.skill, task.tier) in private  # noqa: E731
        # the public set's own slices only: its tiers (arithmetic: 2-8) gain more in an early cycle than the
        # pool's longest, where both models still fail, and that difference would read as a leak
        public = {(task.skill, task.tier) for n, task in self.tasks if n == "public"}
        return {
            "public": (self.paired(lambda n, task: n == "public"),
                       self.paired(lambda n, task: n in POOLED and is_private(task)
                                   and (task.skill, task.tier) in public)),
            "anchor": (self.paired(lambda n, task: n == "anchor" and is_private(task)),
                       self.paired(lambda n, task: n == "refreshed" and is_private(task))),
        }

    def anchor_mean(self, model: int, private: set[tuple[str, int]], skill: str | None = None) -> float:
        """Mean over the private slices (of one skill) of a model's anchor score: comparable across cycles."""
        keep = [self._pair(self._groups[("anchor", s, t)]) for s, t in sorted(private & self._anchor_slices())
                if skill in (None, s)]
        return float(np.mean([(k.challenger if model == 0 else k.champion).mean() for k in keep]))

    def _anchor_slices(self) -> set[tuple[str, int]]:
        return {(s, t) for n, s, t in self._groups if n == "anchor"}


def top_tier(slices: dict[str, Paired], skill: str, model: int, saturation: float) -> int:
    """The highest tier up to which a model (0 challenger, 1 champion) scores `saturation` on every slice of a skill,
    with no tier missing on the way (0: none; a horizon slice past a gap is not 'every tier up to it');
    `slices` as Scored.slices gives them."""
    top = 0
    for tier in sorted(int(name.split("/")[1]) for name in slices if name.split("/")[0] == skill):
        paired = slices[slice_name(skill, tier)]
        if (top and tier != top + 1) or (paired.challenger if model == 0 else paired.champion).mean() < saturation:
            break
        top = tier
    return top
