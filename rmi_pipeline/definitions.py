"""The loop as Dagster definitions: assets, checks, jobs, sensors and resources, built from the settings."""

from dagster import Definitions, in_process_executor

from .assets import ALL
from .automation.alerts import alert_outbox, run_failure_alert
from .automation.dead_runs import dead_run_sensor
from .automation.jobs import canary_trial, health_check, improvement_cycle, ingest_feedback
from .automation.schedules import health_after_cycle, health_after_ingest, health_schedule
from .automation.sensors import canary_sensor, enough_feedback_sensor, new_feedback_sensor, regression_sensor
from .resources import build_resources
from .settings import Settings


def build_definitions(settings: Settings) -> Definitions:
    return Definitions(
        assets=ALL,
        jobs=[ingest_feedback, improvement_cycle, health_check, canary_trial],
        sensors=[new_feedback_sensor, enough_feedback_sensor, regression_sensor, canary_sensor, health_after_ingest,
                 health_after_cycle, run_failure_alert, alert_outbox, dead_run_sensor],
        schedules=[health_schedule(settings.health_cron)],
        resources=build_resources(settings),
        executor=in_process_executor,  # one process per run: a step in its own process costs ~3 s of start-up
    )


defs = build_definitions(Settings())
