"""The loop as Dagster definitions: assets, checks, jobs, sensors and resources, built from the settings."""

from dagster import Definitions, in_process_executor

from .assets import ALL
from .automation.jobs import improvement_cycle, ingest_feedback
from .automation.sensors import new_feedback_sensor
from .resources import build_resources
from .settings import Settings


def build_definitions(settings: Settings) -> Definitions:
    return Definitions(
        assets=ALL,
        jobs=[ingest_feedback, improvement_cycle],
        sensors=[new_feedback_sensor],
        resources=build_resources(settings),
        executor=in_process_executor,  # one process per run: a step in its own process costs ~3 s of start-up
    )


defs = build_definitions(Settings())
