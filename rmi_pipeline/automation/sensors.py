"""new_feedback_sensor: every batch file that lands in feedback/incoming/ becomes a partition and an ingest run."""


from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor

from .. import layout
from ..partitions import feedback_batches
from ..resources.storage import ObjectStore
from ..schema import SUFFIXES, is_batch_file
from .jobs import ingest_feedback


def can_be_partition(name: str) -> bool:
    """Dagster refuses partition keys with '...' or control characters; one such name would fail every tick."""
    return "..." not in name and all(ord(c) >= 32 for c in name)


@sensor(job=ingest_feedback, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def new_feedback_sensor(context: SensorEvaluationContext, storage: ObjectStore):
    """Compares the landed files with the known partitions, so no file is missed whatever its name."""
    known = set(context.instance.get_dynamic_partitions(feedback_batches.name))
    names = [key.rsplit("/", 1)[-1] for key in storage.list(layout.INCOMING)]
    batches = [n for n in names if is_batch_file(n)]
    new = [n for n in batches if n not in known and can_be_partition(n)]
    unusable = [n for n in batches if not can_be_partition(n)]
    if unusable:  # said on every tick, in the sensor's log in the UI, until someone renames the file
        context.log.warning(f"batch files whose names cannot be partitions (rename them): {unusable[:10]}")
    if not new:
        ignored = len(names) - len(batches)
        return SkipReason(f"no new feedback batch among {len(names)} files"
                          + (f"; {ignored} ignored, not {' / '.join(SUFFIXES)}" if ignored else ""))
    return SensorResult(
        run_requests=[RunRequest(partition_key=n, run_key=n, tags={"rmi/trigger": "new_feedback"}) for n in new],
        dynamic_partitions_requests=[feedback_batches.build_add_request(new)],
    )
