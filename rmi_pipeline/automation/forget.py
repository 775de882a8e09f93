"""Deletions completed by the loop itself: the forget_feedback job completes every pending deletion request (from
the gateway's DELETE, Slack's `/rmi forget`, or a run that was stopped) and, asked by the retention schedule, deletes
the feedback past RMI_RETENTION_DAYS; forget_sensor starts it whenever a request waits (privacy/forget.py does the
work). No user id reaches a run's config, tags or logs: the requests are read from the object store."""

from dagster import (
    Config,
    DefaultSensorStatus,
    OpExecutionContext,
    ResourceParam,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)

from ..resources.storage import ObjectStore
from ..settings import Settings


class ForgetConfig(Config):
    retention: bool = False  # also delete the feedback older than RMI_RETENTION_DAYS


@op(tags={"rmi/stage": "privacy"})
def forget_requests(context: OpExecutionContext, config: ForgetConfig, settings: ResourceParam[Settings]) -> None:
    """Every pending deletion completed, oldest first; then, for the retention schedule, feedback past its age."""
    from ..privacy.forget import complete_pending, forget_old

    for audit in complete_pending(settings):
        context.log.info(f"deletion {audit['request_id']} complete: {_counts(audit)}")
    if config.retention:
        audit = forget_old(settings, by="retention schedule", via="dagster")
        context.log.info(f"retention: {_counts(audit)}" if audit else "retention: RMI_RETENTION_DAYS is unset")


@job(tags={"rmi/privacy": "forget"},
     description="Completes every pending deletion of feedback (a user's, asked through the gateway, Slack or "
                 "`rmi feedback forget`) in every store, with an audit entry in privacy/audit/; with retention "
                 "set, also deletes feedback older than RMI_RETENTION_DAYS.")
def forget_feedback():
    forget_requests()


@sensor(job=forget_feedback, default_status=DefaultSensorStatus.RUNNING,
        description="Every RMI_SENSOR_INTERVAL_SECONDS: a deletion request waiting in privacy/forget/pending/ (from "
                    "the gateway's DELETE /v1/users/ID/feedback or Slack's `/rmi forget`) starts forget_feedback, "
                    "one run at a time; a run stopped half way leaves its request, which the next run completes.")
def forget_sensor(context: SensorEvaluationContext, storage: ObjectStore):
    from dagster import DagsterRunStatus, RunsFilter

    from ..privacy.forget import pending

    waiting = pending(storage)
    if not waiting:
        return SkipReason("no deletion request waits")
    active = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
              DagsterRunStatus.STARTED]
    if context.instance.get_runs(RunsFilter(job_name=forget_feedback.name, statuses=active), limit=1):
        return SkipReason(f"{len(waiting)} deletion request(s) wait for the forget_feedback run under way")
    return RunRequest(tags={"rmi/trigger": "forget-request", "rmi/requests": ",".join(waiting)[:200]})


def _counts(audit: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in audit["removed"].items() if v) or "nothing found"
