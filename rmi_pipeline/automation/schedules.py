"""The health check runs on a schedule (hourly by default), after every ingest and after every cycle; retention
deletes old feedback on its own schedule.

After a cycle, a new champion gets its baseline at once, and a champion a cycle failed to replace is checked again.
"""

from dagster import (
    DagsterRunStatus,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    ScheduleDefinition,
    SkipReason,
    run_status_sensor,
)

from ..resources.registry import CHAMPION, ModelRegistry
from .forget import forget_feedback
from .jobs import health_check, improvement_cycle, ingest_feedback, waiting_to_start


def health_schedule(cron: str) -> ScheduleDefinition:
    return ScheduleDefinition(name="health_schedule", job=health_check, cron_schedule=cron,
                              default_status=DefaultScheduleStatus.RUNNING,
                              description=f"Checks the champion's health on the cron '{cron}' (RMI_HEALTH_CRON), "
                                          "even when no feedback lands.")


def retention_schedule(settings) -> ScheduleDefinition:
    """Runs by default and does nothing until RMI_RETENTION_DAYS is set: turning retention on is one setting."""
    days, cron = settings.privacy.retention_days, settings.privacy.retention_cron

    def evaluate(context):
        if days is None:
            return SkipReason("RMI_RETENTION_DAYS is unset: feedback is kept")
        return RunRequest(run_config={"ops": {"forget_requests": {"config": {"retention": True}}}},
                          tags={"rmi/trigger": "retention"})

    return ScheduleDefinition(name="retention_schedule", job=forget_feedback, cron_schedule=cron,
                              execution_fn=evaluate, default_status=DefaultScheduleStatus.RUNNING,
                              description=f"On the cron '{cron}' (RMI_RETENTION_CRON): deletes the feedback older "
                                          "than RMI_RETENTION_DAYS from every store, as `rmi feedback forget` deletes "
                                          "a user's, with an audit entry"
                                          + (f" (now {days} days)." if days else "; skips while it is unset."))


@run_status_sensor(run_status=DagsterRunStatus.SUCCESS, monitored_jobs=[ingest_feedback], request_job=health_check,
                   default_status=DefaultSensorStatus.RUNNING,
                   description="After every successful ingest_feedback run: checks the champion's health, so a "
                               "live regression is seen as soon as its feedback lands (one check for a queue of "
                               "ingests: none while another ingest or a check waits to start).")
def health_after_ingest(context, registry: ModelRegistry):
    if registry.version(CHAMPION) is None:  # nothing to check: the first champion's baseline comes after its cycle
        return SkipReason("no champion yet: health_after_cycle checks the first one once a cycle promotes it")
    if waiting := waiting_to_start(context.instance, ingest_feedback, health_check):
        return SkipReason(f"a {waiting} run waits to start: the check after it sees this batch too")
    return RunRequest(run_key=f"health-after-{context.dagster_run.run_id}", tags={"rmi/trigger": "ingest"})


@run_status_sensor(run_status=DagsterRunStatus.SUCCESS, monitored_jobs=[improvement_cycle], request_job=health_check,
                   default_status=DefaultSensorStatus.RUNNING,
                   description="After every successful improvement_cycle run: a new champion gets its health "
                               "baseline at once; a champion the cycle did not replace is checked again.")
def health_after_cycle(context):
    from dagster import RunsFilter

    # a check that waits to start, or started after this cycle ended, checks the champion the cycle left: the
    # check asked for by an ingest queued behind the cycle usually is one (a second one held the next ingest ~15 s)
    instance = context.instance
    if waiting := waiting_to_start(instance, health_check):
        return SkipReason(f"a {waiting} run waits to start: it checks the champion this cycle left")
    cycle = instance.get_run_record_by_id(context.dagster_run.run_id)
    ended = cycle.end_time if cycle else None
    latest = instance.get_run_records(RunsFilter(job_name=health_check.name), limit=1)
    if ended and latest and latest[0].dagster_run.status in (DagsterRunStatus.STARTED, DagsterRunStatus.SUCCESS) \
            and (latest[0].start_time or 0) >= ended:
        return SkipReason(f"health_check run {latest[0].dagster_run.run_id[:8]} started after this cycle ended: "
                          "it checks the champion the cycle left")
    return RunRequest(run_key=f"health-after-{context.dagster_run.run_id}", tags={"rmi/trigger": "cycle"})
