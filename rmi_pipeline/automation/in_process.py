"""A sensor tick and the runs it asks for, executed in this process instead of by the daemon.

`rmi run`, `rmi feedback ingest`, the benches and the tests turn the loop this way: the same sensor and jobs the
daemon would run, on the same Dagster instance, so what they record is what a deployment records. Each run is
tagged with this process, so that if it is killed a later process marks the run failed (dead_runs.py) and the
batch it held is ingested again.
"""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

from .dead_runs import fail_dead_runs, process_tags
from .jobs import ingest_feedback
from .sensors import new_feedback_sensor

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # run config: warnings and errors only
INGEST_COUNTS = ("rows_in", "ingested", "duplicates", "quarantined")  # feedback_events metadata that adds up


def launched_here() -> dict[str, str]:
    """Tags of a run this process executes itself: who and which command, which the UI shows as "Launched by"
    (else "Manually launched"), and what lets a later process tell whether this one is still alive."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    program = "rmi" if program in ("rmi", "main.py") else program  # main.py: python -m rmi_pipeline.cli.main
    words = [a for a in sys.argv[1:3] if not a.startswith("-")]
    return {"user": f"{getpass.getuser()} ({' '.join([program, *words])})", **process_tags()}


def keep_what_is_loaded() -> None:
    """What a process has loaded by its first run (Dagster, torch, MLflow, Great Expectations: some 600,000 objects)
    leaves the garbage collector's full passes, each of which walked it all: 0.3 s at a random point of a cycle.
    Called once, after the first run, by a process that turns cycle after cycle."""
    import gc

    gc.collect()
    gc.freeze()


def ingest_new_batches(defs, instance) -> dict:
    """One tick of new_feedback_sensor, with its ingest runs executed here; the counts of every batch, summed."""
    from dagster import build_sensor_context

    from .batches import register_batches

    fail_dead_runs(instance, defs.resources["registry"])  # a batch a killed process held is ingested again
    sensor = defs.resolve_sensor_def(new_feedback_sensor.name)
    resources = {key: defs.resources[key] for key in sensor.required_resource_keys}
    result = sensor(build_sensor_context(instance=instance, resources=resources))
    totals = {"batches": 0, **dict.fromkeys(INGEST_COUNTS, 0), "failed": 0, "already_landing": 0}
    if not hasattr(result, "run_requests"):
        return totals
    for request in result.dynamic_partitions_requests or []:
        register_batches(instance, list(request.partition_keys))
    for run in result.run_requests or []:
        counts = ingest_batch(defs, instance, run.partition_key, dict(run.tags))
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + value
    return totals


def ingest_batch(defs, instance, name: str, tags: dict[str, str]) -> dict:
    """The ingest job on one batch, here and now, unless another process is landing it; its counts."""
    from ..assets.feedback import feedback_events
    from .batches import batch_states

    settings, storage = defs.resources["settings"], defs.resources["storage"]
    if batch_states(instance, [name], storage, settings)[name].state == "landing":
        return {"already_landing": 1}
    out = defs.resolve_job_def(ingest_feedback.name).execute_in_process(
        instance=instance, partition_key=name, raise_on_error=False, run_config=QUIET_LOGS,
        tags={**tags, **launched_here()})
    counts = {"batches": 1, "failed": int(not out.success)}
    for event in out.get_asset_materialization_events():
        if event.asset_key == feedback_events.key:
            counts |= {key: event.materialization.metadata[key].value for key in INGEST_COUNTS}
    return counts
