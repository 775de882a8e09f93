"""What a deletion removed, counted once however often it is killed and redone.

The counts live in the request itself (privacy/forget/pending/<id>.json). Before a file is rewritten, what the rewrite
removes is noted with a hash of the file as it was; once written, the note becomes counts. A run that finds a note
left by a killed one reads the file: changed, the rewrite happened and the note counts; unchanged, it did not, and the
step that follows counts those rows itself.
"""

from __future__ import annotations

import hashlib
import json


class Ledger:
    def __init__(self, storage, key: str, state: dict, stores: list):
        self.storage, self.key, self.state = storage, key, state
        self.stores = {store.url: store for store in stores if store is not None}

    def save(self) -> None:
        self.storage.write_json(self.key, self.state)

    def add(self, counts: dict) -> None:
        """Counts of a store that deletes in place (the warehouse, the gateway's log), once it has committed."""
        for name, n in counts.items():
            if n:
                self.state["removed"][name] = self.state["removed"].get(name, 0) + int(n)
        self.save()

    def rewrite(self, store, key: str, before: bytes, after: bytes, counts: dict, dataset: str | None = None) -> None:
        """Replace a file that held rows in scope by `after`, noting `counts` first (and the dataset version it is
        part of: the models trained on it learned from those rows)."""
        self.state["rewriting"] = {"store": store.url, "key": key, "before": _digest(before), "counts": counts,
                                   "dataset": dataset}
        self.save()
        store.write_bytes(key, after)
        self._settle(True)

    def write_json(self, store, key: str, before: bytes, value, counts: dict) -> None:
        self.rewrite(store, key, before, json.dumps(value, sort_keys=True).encode(), counts)  # as write_json does

    def write_parquet(self, store, key: str, before: bytes, frame, counts: dict, dataset: str | None = None) -> None:
        import io

        buffer = io.BytesIO()
        frame.write_parquet(buffer)
        self.rewrite(store, key, before, buffer.getvalue(), counts, dataset)

    def resume(self) -> None:
        """Settle the note a killed run left: counted if its file was rewritten, dropped if not."""
        note = self.state.get("rewriting")
        if note is None:
            return
        store = self.stores.get(note["store"])
        data = store.read_bytes(note["key"]) if store is not None and store.exists(note["key"]) else b""
        self._settle(_digest(data) != note["before"])

    def _settle(self, written: bool) -> None:
        note = self.state.pop("rewriting")
        if written:
            for name, n in note["counts"].items():
                self.state["removed"][name] = self.state["removed"].get(name, 0) + int(n)
            if note.get("dataset"):
                self.state["datasets"] = sorted({*self.state["datasets"], note["dataset"]})
        self.save()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
