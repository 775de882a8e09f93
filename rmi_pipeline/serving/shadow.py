"""Shadow mode (RMI_SERVE_SHADOW=true): the challenger answers what users ask the champion, in the background, unseen.

After each of the champion's batches, the same prompts go to the challenger in a worker of its own; its answers
are compared with the champion's and scored by the recipe's verifier, never returned, logged or stored as
answers. Per slice: answers, agreement with the champion, mean verifier reward, and the challenger's decoding
time. Users never wait for it: when the worker is still busy with earlier batches, a batch is skipped and counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..ml.tasks import slice_name

log = logging.getLogger(__name__)
MAX_PENDING = 2  # batches waiting for the shadow worker; more are skipped, never queued behind users
LATENCIES_KEPT = 10_000  # per slice, the latest: the percentiles of a long run in bounded memory


@dataclass
class SliceStats:
    answers: int = 0
    agreed: int = 0
    reward: float | None = 0.0  # None: no verifier to reward with
    seconds: deque = field(default_factory=lambda: deque(maxlen=LATENCIES_KEPT))  # each answer's share of its
    # batch's decoding time

    def as_dict(self) -> dict:
        ordered = sorted(self.seconds)
        at = lambda q: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)  # noqa: E731
        return {"answers": self.answers, "agreement": round(self.agreed / self.answers, 4),
                "verifier_reward": None if self.reward is None else round(self.reward / self.answers, 4),
                "latency_ms_p50": at(0.5), "latency_ms_p95": at(0.95)}


class Shadow:
    def __init__(self, followed, recipe):
        self.followed, self.recipe = followed, recipe
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shadow")
        self._lock = threading.Lock()
        self._pending = 0
        self.version: str | None = None
        self.stats: dict[str, SliceStats] = {}
        self.skipped = 0

    def submit(self, version: str, prompts: list[str], completions: list[str]) -> None:
        """The champion's batch (answered by `version`), to be answered again by the challenger when the worker
        is free; not when the challenger is that same version (it stays `challenger` after its promotion)."""
        loaded = self.followed.current
        if loaded is None or loaded.version == version:
            return
        with self._lock:
            if self._pending >= MAX_PENDING:
                self.skipped += len(prompts)
                return
            self._pending += 1
        self._worker.submit(self._answer, loaded, prompts, completions)

    def _answer(self, loaded, prompts: list[str], completions: list[str]) -> None:
        try:
            started = time.perf_counter()
            shadow = self.completions(loaded, prompts)
            each = (time.perf_counter() - started) / len(prompts)
            rows = [(self._slice(p), s == c, self._reward(p, s)) for p, s, c in zip(prompts, shadow, completions,
                                                                                    strict=True)]
        except Exception as exc:  # noqa: BLE001 - the shadow never fails a user's request
            log.warning("the shadow model failed on a batch: %s: %s", type(exc).__name__, str(exc)[:200])
            rows, each = [], 0.0
        with self._lock:
            self._pending -= 1
            if loaded.version != self.version:  # a new challenger: its own tally
                self.version, self.stats, self.skipped = loaded.version, {}, 0
            for name, agreed, reward in rows:
                stats = self.stats.setdefault(name, SliceStats())
                stats.answers += 1
                stats.agreed += agreed
                stats.reward = None if reward is None else stats.reward + reward
                stats.seconds.append(each)

    def completions(self, loaded, prompts: list[str]) -> list[str]:
        """The challenger's greedy answers to `prompts` (`loaded`: the version it answers with)."""
        return self.recipe.answer(loaded.model, prompts)

    def _slice(self, prompt: str) -> str:
        return slice_name(*self.recipe.slice_of(prompt)) if self.recipe.is_valid_prompt(prompt) else "invalid"

    def _reward(self, prompt: str, completion: str) -> float | None:
        """The verifier's reward; None for a recipe without one (the shadow then counts agreement only)."""
        if not self.recipe.has("verifier"):
            return None
        return self.recipe.verify(prompt, completion)[0] if self.recipe.is_valid_prompt(prompt) else 0.0

    def report(self) -> dict:
        with self._lock:
            return {"challenger_version": self.version, "skipped": self.skipped,
                    "slices": {name: s.as_dict() for name, s in sorted(self.stats.items())}}

    def stop(self) -> None:
        self._worker.shutdown(wait=True)
