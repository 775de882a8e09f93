"""A sensor tick and the runs it asks for, executed in this process instead of by the daemon.

`rmi run`, `rmi feedback ingest`, the benches and the tests turn the loop this way: the same sensor and jobs the
daemon would run, on the same Dagster instance, so what they record is what a deployment records.
"""

from __future__ import annotations

from .jobs import ingest_feedback
from .sensors import new_feedback_sensor

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # run config: warnings and errors only
INGEST_COUNTS = ("rows_in", "ingested", "duplicates", "quarantined")  # feedback_events metadata that adds up


def ingest_new_batches(defs, instance) -> dict:
    """One tick of new_feedback_sensor, with its ingest runs executed here; the counts of every batch, summed."""
    from dagster import build_sensor_context

    from ..assets.feedback import feedback_events

    sensor = defs.resolve_sensor_def(new_feedback_sensor.name)
    resources = {key: defs.resources[key] for key in sensor.required_resource_keys}
    result = sensor(build_sensor_context(instance=instance, resources=resources))
    totals = {"batches": 0, **dict.fromkeys(INGEST_COUNTS, 0), "failed": 0}
    if not hasattr(result, "run_requests"):
        return totals
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    job = defs.resolve_job_def(ingest_feedback.name)
    for run in result.run_requests or []:
        out = job.execute_in_process(instance=instance, partition_key=run.partition_key, raise_on_error=False,
                                     run_config=QUIET_LOGS, tags=dict(run.tags))
        totals["batches"] += 1
        totals["failed"] += not out.success
        for event in out.get_asset_materialization_events():
            if event.asset_key == feedback_events.key:
                meta = event.materialization.metadata
                for key in INGEST_COUNTS:
                    totals[key] += meta[key].value
    return totals
