"""The gateway's heartbeat file in the object store: how the pipeline knows a canary would get users.

Rewritten every HEARTBEAT_SECONDS while the gateway runs and removed when it stops; assets/promotion.py counts the
fresh ones (RMI_PROMOTION=auto: a canary only while a gateway of the champion serves).
"""

from __future__ import annotations

import logging
import time

from ..resources.layout import HEARTBEAT_SECONDS

log = logging.getLogger("rmi.serve")


class Heartbeat:
    """`beat` at most every HEARTBEAT_SECONDS writes {alias, canary_share, at} at `key`; `stop` deletes it."""

    def __init__(self, storage, key: str, alias: str, canary_share: float):
        self.storage, self.key, self.alias, self.canary_share = storage, key, alias, canary_share
        self.last = 0.0

    def beat(self) -> None:
        if time.monotonic() - self.last < HEARTBEAT_SECONDS:
            return
        try:
            self.storage.write_json(self.key, {"alias": self.alias, "canary_share": self.canary_share,
                                               "at": time.time()})
            self.last = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the store out of reach: answering goes on
            log.warning("could not say this gateway serves (%s); retried", str(exc)[:200])

    def stop(self) -> None:
        try:
            self.storage.delete(self.key)
        except Exception:  # noqa: BLE001 - a stale file ages out on its own
            pass
