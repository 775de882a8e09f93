"""The derivative's gate: a smaller student keeps the champion's quality (non-inferiority, not superiority) and
answers faster, both measured.

It passes when no counted slice keeps less than 1 - tolerance of the champion's score, the overall mean's interval
(the gate's paired bootstrap, a slice a stratum) stays above the champion's less tolerance x its score, and it
answers at least `min_speedup` times as many prompts per second, timed in this process on the same prompts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .gate import Paired, interval


@dataclass
class Kept:
    """One slice: the student's score against the champion's, and the paired delta's interval."""

    name: str
    items: int
    student: float
    champion: float
    low: float
    high: float
    kept: bool


@dataclass
class Verdict:
    passed: bool
    reason: str
    student_mean: float
    champion_mean: float
    low: float  # the overall delta's interval
    high: float
    speedup: float
    student_per_second: float
    champion_per_second: float
    slices: list[Kept] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def answers_per_second(recipe, models: list, prompts: list[str], threads: int = 1, rounds: int = 3) -> list[float]:
    """Prompts each model answers per second by `recipe.answer` in this process on `threads` CPU threads (the
    gateway's RMI_SERVE_THREADS): the best of `rounds` timed passes, the models timed in turns after one untimed
    pass each (the best: a shared CPU only ever slows a pass down; in turns: a machine that gets busier between two
    timings would skew their ratio)."""
    import torch

    from .cores import limit_processes

    before, processes = torch.get_num_threads(), limit_processes(1)
    torch.set_num_threads(threads)
    best = [float("inf")] * len(models)
    try:
        for model in models:
            recipe.answer(model, prompts[:64])
        for _ in range(rounds):
            for i, model in enumerate(models):
                started = time.perf_counter()
                recipe.answer(model, prompts)
                best[i] = min(best[i], time.perf_counter() - started)
    finally:
        torch.set_num_threads(before)
        limit_processes(processes)
    return [len(prompts) / max(seconds, 1e-9) for seconds in best]


def judge(slices: dict[str, Paired], counted: set[str], tolerance: float, speeds: Sequence[float],
          min_speedup: float, confidence: float, resamples: int, seed: int = 0) -> Verdict:
    """`slices`: the student as the challenger, the champion as the champion; `speeds`: (student, champion)
    prompts per second."""
    if not counted:
        raise ValueError("the eval suite has no private slice: nothing honest to judge a derivative on")
    rng = np.random.default_rng(seed)
    results = []
    for name in sorted(counted):
        pair = slices[name]
        delta = np.asarray(pair.challenger, dtype=float) - np.asarray(pair.champion, dtype=float)
        low, high = interval([delta], confidence, resamples, rng)
        student, champion = float(pair.challenger.mean()), float(pair.champion.mean())
        results.append(Kept(name, len(delta), student, champion, low, high, student >= (1 - tolerance) * champion))
    student = float(np.mean([r.student for r in results]))
    champion = float(np.mean([r.champion for r in results]))
    low, high = interval([np.asarray(slices[n].challenger, dtype=float) - np.asarray(slices[n].champion, dtype=float)
                          for n in sorted(counted)], confidence, resamples, rng)
    speedup = speeds[0] / max(speeds[1], 1e-9)
    lost = [r for r in results if not r.kept]
    level, margin = f"{confidence:.0%}", tolerance * champion
    summary = (f"{student:.3f} vs champion {champion:.3f} on the counted slices (delta {level} interval {low:+.3f} to "
               f"{high:+.3f}, margin -{margin:.3f}), {speedup:.2f}x the champion's answers per second "
               f"({speeds[0]:.0f}/s vs {speeds[1]:.0f}/s)")
    if lost:
        worst = min(lost, key=lambda r: r.student / max(r.champion, 1e-9))
        reason = (f"Not kept: slice {worst.name} keeps {worst.student:.3f} of the champion's {worst.champion:.3f}, "
                  f"under {1 - tolerance:.0%} of it; {summary}.")
    elif low < -margin:
        reason = f"Not kept: overall it may lose more than {tolerance:.0%} of the champion's score: {summary}."
    elif speedup < min_speedup:
        reason = f"Not kept: not {min_speedup:g}x as fast; {summary}."
    else:
        reason = f"Kept: every counted slice within {tolerance:.0%} of the champion's score; {summary}."
    return Verdict(reason.startswith("Kept"), reason, student, champion, low, high, speedup, speeds[0], speeds[1],
                   results)


def markdown(verdict: Verdict) -> str:
    """The verdict as the UI shows it: one sentence, then every counted slice."""
    lines = [verdict.reason, "", "| slice | items | derivative | champion | delta interval | kept |",
             "|---|---|---|---|---|---|"]
    for s in verdict.slices:
        lines.append(f"| {s.name} | {s.items} | {s.student:.3f} | {s.champion:.3f} | {s.low:+.3f} to {s.high:+.3f} | "
                     f"{'yes' if s.kept else 'no'} |")
    return "\n".join(lines)
