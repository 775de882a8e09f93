"""The model the gateway answers with: loaded by alias from the registry, and followed when the alias moves.

A new version is loaded in the background while the old one keeps answering, then swapped in by one reference
assignment: a batch holds the (version, model) pair it started with, so no request fails during a swap and every
answer records the version that produced it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loaded:
    version: str
    model: object
    loaded_at: float
    load_seconds: float


class FollowedModel:
    def __init__(self, registry, recipe, alias: str, reload_seconds: float, drop_when_gone: bool = False,
                 serves: Callable[[object], bool] | None = None):
        """`drop_when_gone`: stop answering when the alias is removed (a canary that ended); the champion keeps
        answering with what it has when the registry names none, or cannot be reached. `serves`: whether the
        version behind the alias is one to answer with (a canary on trial for another alias counts as absent)."""
        self.registry, self.recipe, self.alias, self.reload_seconds = registry, recipe, alias, reload_seconds
        self.drop_when_gone, self.serves = drop_when_gone, serves
        self.current: Loaded | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"follow-{alias}", daemon=True)

    def start(self) -> None:
        self.check()  # the first load happens before the gateway says it is ready, not after a wait
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():  # never started: a gateway stopped before it finished starting
            self._thread.join(timeout=10)

    def load(self, mv) -> object:
        """What answers as the model version `mv` (an MLflow ModelVersion): the model, loaded by its recipe."""
        return self.registry.load(mv.version, self.recipe)

    def check(self) -> bool:
        """Load the version behind the alias if it is not the one answering; True when it swapped one in."""
        try:
            mv = self.registry.version(self.alias)
            if mv is not None and self.serves is not None and not self.serves(mv):
                mv = None
            if mv is None and self.drop_when_gone and self.current is not None:
                log.info("@%s v%s ended: no longer answering with it", self.alias, self.current.version)
                self.current = None
                return True
            if mv is None or (self.current and self.current.version == str(mv.version)):
                return False
            started = time.perf_counter()
            model = self.load(mv)
            loaded = Loaded(str(mv.version), model, time.time(), time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001 - the registry out of reach: keep answering with what we have
            message = f"cannot load @{self.alias}: {type(exc).__name__}: {str(exc)[:300]}"
            if message != self.last_error:
                log.warning("%s (still serving %s)", message, self.current.version if self.current else "nothing")
            self.last_error = message
            return False
        previous, self.current, self.last_error = self.current, loaded, None
        log.info("now serving %s v%s (was %s; loaded in %.2f s)", self.alias, loaded.version,
                 f"v{previous.version}" if previous else "nothing", loaded.load_seconds)
        return True

    def _follow(self) -> None:
        while not self._stop.wait(self.reload_seconds):
            self.check()
