"""A task (one problem with its true answer) and the name of the slice it belongs to.

The recipe contract (recipes/base.py) hands these out; the method code in ml/ scores and groups by them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def slice_name(skill: str, tier: int | str | None) -> str:
    """The name a slice goes by everywhere (evals, health, focus, the UI): 'add/5'. The eval's mined hard cases
    of a skill are the slice 'mined/add'; an eval file's slice has no tier and goes by its metadata: 'prices'."""
    return skill if tier is None else f"{skill}/{tier}"


def spans(tiers: list[int]) -> str:
    """Tiers as runs of consecutive ones: [1, 2, 3, 40] -> '1-3, 40'."""
    runs: list[list[int]] = []
    for tier in sorted(tiers):
        if runs and tier == runs[-1][-1] + 1:
            runs[-1].append(tier)
        else:
            runs.append([tier])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


@dataclass(frozen=True)
class Task:
    """One problem with its true answer (None where an eval file gives no target: a judge grades it without one);
    `skill` and `tier` name its slice (an eval file's item: its slice, and no tier); `metadata`: an eval file's
    other columns, which a scorer may read (a numeric tolerance, a rubric)."""

    prompt: str
    answer: str | None
    skill: str
    tier: int | None
    metadata: dict = field(default_factory=dict, compare=False)

    @property
    def slice(self) -> str:
        return slice_name(self.skill, self.tier)
