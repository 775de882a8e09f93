"""Where each feedback batch stands, from Dagster's own records: a batch has landed only once feedback_events has
materialized its partition (after the warehouse committed it), never merely because its partition exists.

So a batch whose ingest failed, or whose process was killed, is ingested again (a bounded number of times, with a
doubling backoff), and one that landed never is. new_feedback_sensor, `rmi feedback ingest` and `rmi status` read it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..assets import feedback_events
from ..assets.partitions import feedback_batches
from ..resources import layout
from .jobs import ingest_feedback

STATES = ("new", "retry", "landing", "backoff", "landed", "quarantined", "given_up")


@dataclass(frozen=True)
class Batch:
    name: str
    state: str  # one of STATES
    attempts: int = 0  # ingest runs so far
    wait_seconds: float = 0.0  # until the next retry, in backoff
    last_run_id: str | None = None


def register_batches(instance, names: list[str]) -> None:
    """Add the batches' partitions. Dagster checks for a key and then inserts it, so two processes registering the
    same file at once race there; the one that loses finds it registered and goes on (its ingest then learns the
    other is landing it) instead of failing with the store's unique-key error."""
    from sqlalchemy.exc import IntegrityError

    try:
        instance.add_dynamic_partitions(feedback_batches.name, names)
    except IntegrityError:
        if not all(instance.has_dynamic_partition(feedback_batches.name, name) for name in names):
            raise


def batch_states(instance, names: list[str], storage, settings) -> dict[str, Batch]:
    """The state of each named batch: new (no partition yet), retry (its ingest failed or died, or never ran),
    landing (a run is in progress), backoff, landed, quarantined (too many bad rows: it waits for a person), or
    given_up (failed RMI_FEEDBACK_INGEST_RETRIES + 1 times)."""
    from dagster import DagsterRunStatus, RunsFilter

    landed = set(instance.get_materialized_partitions(feedback_events.key))
    registered = set(instance.get_dynamic_partitions(feedback_batches.name))
    ended = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
    out = {}
    for name in names:
        if name in landed:
            out[name] = Batch(name, "landed")
            continue
        if name not in registered:
            out[name] = Batch(name, "new")
            continue
        runs = instance.get_runs(RunsFilter(job_name=ingest_feedback.name, tags={"dagster/partition": name}))
        last = runs[0].run_id if runs else None
        if any(r.status not in ended for r in runs):
            out[name] = Batch(name, "landing", len(runs), last_run_id=last)
        elif runs and _quarantined_whole(storage, name):
            out[name] = Batch(name, "quarantined", len(runs), last_run_id=last)
        elif len(runs) > settings.feedback.ingest_retries:
            out[name] = Batch(name, "given_up", len(runs), last_run_id=last)
        else:
            record = instance.get_run_record_by_id(last) if last else None
            backoff = settings.feedback.ingest_backoff_seconds * 2 ** (len(runs) - 1)
            ready = (record.end_time or 0) + backoff if record else 0
            wait = max(0.0, ready - time.time())
            out[name] = Batch(name, "backoff" if wait else "retry", len(runs), wait, last)
    return out


def _quarantined_whole(storage, name: str) -> bool:
    """Its check found too many bad rows: the batch waits in quarantine for a person, and a retry would not help."""
    key = layout.validated_summary(name)
    return storage.exists(key) and bool(storage.read_json(key).get("quarantined_whole"))
