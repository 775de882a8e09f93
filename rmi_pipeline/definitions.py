"""The loop as Dagster definitions: assets, checks, jobs, sensors and resources, built from the settings."""

from dagster import Definitions, in_process_executor

from .assets import ALL
from .automation.alerts import alert_outbox, run_failure_alert
from .automation.dead_runs import dead_run_sensor
from .automation.forget import forget_feedback, forget_sensor
from .automation.jobs import canary_trial, derivative, health_check, improvement_cycle, ingest_feedback
from .automation.schedules import health_after_cycle, health_after_ingest, health_schedule, retention_schedule
from .automation.sensors import (
    approval_deadline_sensor,
    canary_sensor,
    derivative_sensor,
    enough_feedback_sensor,
    generation_sensor,
    new_feedback_sensor,
    regression_sensor,
)
from .resources import build_resources
from .settings import Settings


def build_definitions(settings: Settings) -> Definitions:
    return Definitions(
        assets=catalogued(ALL, settings),
        jobs=[ingest_feedback, improvement_cycle, derivative, health_check, canary_trial, forget_feedback],
        sensors=[*(every(s, settings.automation.feedback_interval_seconds, "RMI_FEEDBACK_INTERVAL_SECONDS")
                   for s in (new_feedback_sensor, enough_feedback_sensor)),
                 *(every(s, settings.automation.sensor_interval_seconds, "RMI_SENSOR_INTERVAL_SECONDS") for s in (
                     regression_sensor, canary_sensor, generation_sensor, derivative_sensor, approval_deadline_sensor,
                     health_after_ingest, health_after_cycle, run_failure_alert, forget_sensor)),
                 alert_outbox, dead_run_sensor],  # those two: every minute
        schedules=[health_schedule(settings.health.cron), retention_schedule(settings)],
        resources=build_resources(settings),
        executor=in_process_executor,  # one process per run: a step in its own process costs ~3 s of start-up
    )


def every(sensor, seconds: int, setting: str):
    """The sensor evaluated at most every `seconds` under the daemon, its description saying so where it names
    `setting`. Dagster sets the interval only in the decorator, and the loop's sensors are module-level, so the copy
    gets its attributes (tests/test_definitions.py checks that Dagster reads them)."""
    import copy

    tuned = copy.copy(sensor)
    tuned._min_interval = seconds
    if sensor.description:
        tuned._description = sensor.description.replace(setting, f"{seconds} s ({setting})", 1)
    return tuned


USER_TEXT = {"feedback_batch", "feedback_events", "training_dataset"}  # hold what users wrote: untrusted, personal


def catalogued(assets: list, settings: Settings) -> list:
    """The assets as the catalog shows them: owners, a tag on those that hold users' text, and a link to the code
    that makes each (to RMI_UI_CODE_URL at RMI_UI_CODE_BRANCH, or the file on this machine)."""
    import warnings
    from pathlib import Path

    from dagster import (
        AnchorBasedFilePathMapping,
        BetaWarning,
        link_code_references_to_git,
        map_asset_specs,
        with_source_code_references,
    )

    owners = [o.strip() for o in settings.ui.asset_owners.split(",") if o.strip()]
    assets = map_asset_specs(lambda spec: spec.replace_attributes(
        owners=owners, tags={**spec.tags, **({"rmi/user-text": ""} if spec.key.to_user_string() in USER_TEXT else {})},
    ), assets)
    with warnings.catch_warnings():  # code references are a beta API of Dagster's: its warning says nothing to users
        warnings.simplefilter("ignore", BetaWarning)
        assets = with_source_code_references(assets)
        if settings.ui.code_url is None:
            return assets
        return link_code_references_to_git(assets, git_url=settings.ui.code_url, git_branch=settings.ui.code_branch,
                                           file_path_mapping=AnchorBasedFilePathMapping(
                                               local_file_anchor=Path(__file__),
                                               file_anchor_path_in_repository="rmi_pipeline/definitions.py"))


defs = build_definitions(Settings())


def improvement_cycle_job():
    """The improvement_cycle job as a process of its own reloads it (`dagster.execute_job(reconstructable(...))` with
    the multiprocess executor: each step's process imports this module and finds the job here)."""
    return defs.resolve_job_def("improvement_cycle")
