"""The scorer contract: `score(input, output, target, metadata) -> (value in [0, 1], explanation)`, checked the same
way for every scorer (a target where one is needed, a value in [0, 1]), whether built in, a judge or a team's own."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class ScorerError(ValueError):
    """A scorer that cannot score as asked: no target, a bad pattern, a value outside [0, 1], an unknown name."""


@dataclass(frozen=True)
class ScoreRequest:
    """One answer to score: the item's input and target (None when the item has none), the model's output."""

    input: str
    output: str
    target: str | None = None
    metadata: dict = field(default_factory=dict)


class Scorer:
    """The scorer contract: `score` checks what every scorer must (a target where one is needed, a value in [0, 1])
    around `grade`, which each scorer writes; `score_many` scores rows one by one unless a scorer knows better."""

    name: str = "scorer"
    needs_target: bool = True

    def score(self, input: str, output: str, target: str | None = None,
              metadata: dict | None = None) -> tuple[float, str]:
        if target is None and self.needs_target:
            raise ScorerError(f"the {self.name} scorer needs a target (the expected answer) and this item has none; "
                              "score items without one with the judge or a scorer of your own")
        return checked(self.name, self.grade(input, output, target, metadata or {}))

    def grade(self, input: str, output: str, target: str | None, metadata: dict) -> tuple[float, str]:
        raise NotImplementedError

    def score_many(self, rows: Iterable[ScoreRequest]) -> list[tuple[float, str]]:
        return [self.score(r.input, r.output, r.target, r.metadata) for r in rows]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def checked(name: str, result: Any) -> tuple[float, str]:
    """A scorer's result as (float in [0, 1], str), or a ScorerError naming the scorer: a bad value must not reach
    the gate, where it would skew a mean without a sound."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ScorerError(f"scorer {name!r} returned {result!r}, not a (value, explanation) pair")
    value, explanation = result
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or \
            not 0.0 <= value <= 1.0:
        raise ScorerError(f"scorer {name!r} returned the value {value!r}; a score must be a number in [0, 1]")
    if not isinstance(explanation, str):
        raise ScorerError(f"scorer {name!r} returned the explanation {explanation!r}; it must be a string")
    return float(value), explanation
