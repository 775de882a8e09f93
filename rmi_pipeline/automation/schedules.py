"""The health check runs on a schedule (hourly by default), after every ingest and after every cycle.

After a cycle, a new champion gets its baseline at once, and a champion a cycle failed to replace is checked again.
"""

from dagster import (
    DagsterRunStatus,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    RunRequest,
    ScheduleDefinition,
    run_status_sensor,
)

from .jobs import health_check, improvement_cycle, ingest_feedback


def health_schedule(cron: str) -> ScheduleDefinition:
    return ScheduleDefinition(name="health_schedule", job=health_check, cron_schedule=cron,
                              default_status=DefaultScheduleStatus.RUNNING)


@run_status_sensor(run_status=DagsterRunStatus.SUCCESS, monitored_jobs=[ingest_feedback], request_job=health_check,
                   default_status=DefaultSensorStatus.RUNNING, minimum_interval_seconds=30)
def health_after_ingest(context):
    return RunRequest(run_key=f"health-after-{context.dagster_run.run_id}", tags={"rmi/trigger": "ingest"})


@run_status_sensor(run_status=DagsterRunStatus.SUCCESS, monitored_jobs=[improvement_cycle], request_job=health_check,
                   default_status=DefaultSensorStatus.RUNNING, minimum_interval_seconds=30)
def health_after_cycle(context):
    return RunRequest(run_key=f"health-after-{context.dagster_run.run_id}", tags={"rmi/trigger": "cycle"})
