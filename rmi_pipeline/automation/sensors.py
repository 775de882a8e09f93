"""new_feedback_sensor: every batch file that lands in feedback/incoming/ becomes a partition and an ingest run."""


from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor

from .. import layout
from ..partitions import feedback_batches
from ..resources.storage import ObjectStore
from ..schema import is_batch_file
from .jobs import ingest_feedback


@sensor(job=ingest_feedback, minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING)
def new_feedback_sensor(context: SensorEvaluationContext, storage: ObjectStore):
    """Compares the landed files with the known partitions, so no file is missed whatever its name."""
    known = set(context.instance.get_dynamic_partitions(feedback_batches.name))
    names = [key.rsplit("/", 1)[-1] for key in storage.list(layout.INCOMING)]
    new = [n for n in names if is_batch_file(n) and n not in known]
    if not new:
        return SkipReason(f"no new feedback batch among {len(names)} files")
    return SensorResult(
        run_requests=[RunRequest(partition_key=n, run_key=n, tags={"rmi/trigger": "new_feedback"}) for n in new],
        dynamic_partitions_requests=[feedback_batches.build_add_request(new)],
    )
