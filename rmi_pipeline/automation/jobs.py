"""The jobs of the loop: ingest one feedback batch, run one improvement cycle, check the champion's health."""

from dagster import AssetSelection, define_asset_job

from ..assets import CYCLE, FEEDBACK, canary_verdict, champion_health
from ..assets.partitions import feedback_batches

ingest_feedback = define_asset_job(
    "ingest_feedback",
    selection=AssetSelection.assets(*FEEDBACK),
    partitions_def=feedback_batches,
    description="Validate one landed feedback batch and land its events in the warehouse.",
)

improvement_cycle = define_asset_job(
    "improvement_cycle",
    selection=AssetSelection.assets(*CYCLE),
    description="Dataset from all feedback -> candidate -> evaluation against the champion -> promotion.",
)

health_check = define_asset_job(
    "health_check",
    selection=AssetSelection.assets(champion_health),
    description="The champion on the current eval suite and its live thumbs-down rates, against its baseline.",
)

canary_trial = define_asset_job(
    "canary_trial",
    selection=AssetSelection.assets(canary_verdict),
    description="The canary's users against the champion's: promote it, abort it, or wait for more rated answers.",
)


def waiting_to_start(instance, *jobs) -> str | None:
    """The first of `jobs` with a run in the queue that has not started, else None. A check or a verdict already
    waiting will read the latest state when it runs, so asking for another per batch only lengthens the queue
    (with one run at a time, a batch a minute had a backlog of 30 runs within 10 minutes)."""
    from dagster import DagsterRunStatus, RunsFilter

    waiting = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING]
    return next((job.name for job in jobs
                 if instance.get_runs(RunsFilter(job_name=job.name, statuses=waiting), limit=1)), None)
