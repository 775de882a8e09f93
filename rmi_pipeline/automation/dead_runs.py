"""Runs whose process died (a kill -9, an out-of-memory kill, a lost machine) are marked failed, so the queue moves
on, the sensors stop waiting on them and the batch or cycle they held is tried again.

A run executed in process (`rmi run`, `rmi feedback ingest`) is tagged with its process id and host; a run the
daemon launched on this machine names its process in its first engine event. A run whose process is gone is marked
failed here, and the MLflow run of a candidate it was training ends FAILED. Runs elsewhere (a Kubernetes pod) are
left to Dagster's run monitoring (dagster.yaml: run_monitoring, a run is failed after RMI_RUN_TIMEOUT_SECONDS).
"""

from __future__ import annotations

import os
import socket

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from ..resources.registry import ModelRegistry

PID, HOST = "rmi/pid", "rmi/host"


def process_tags() -> dict[str, str]:
    """Tags that let a later process tell whether this one is still alive."""
    return {PID: str(os.getpid()), HOST: socket.gethostname()}


def fail_dead_runs(instance, registry: ModelRegistry | None = None) -> list[str]:
    """Mark failed every unfinished run of this machine whose process is gone; returns their run ids."""
    from dagster import DagsterRunStatus, RunsFilter

    unfinished = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
    dead = []
    for run in instance.get_runs(RunsFilter(statuses=unfinished)):
        pid = _pid_of(instance, run)
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        instance.report_run_failed(run, f"the process of this run (pid {pid}) is gone: it was killed or crashed; "
                                        "marked failed so that the loop goes on")
        dead.append(run.run_id)
        if registry is not None:
            registry.end_runs_of(run.run_id, "FAILED")
    return dead


def _pid_of(instance, run) -> int | None:
    """The process of a run on this machine, or None where it cannot be told from here."""
    if PID in run.tags:
        return int(run.tags[PID]) if run.tags.get(HOST) == socket.gethostname() else None
    from dagster import DagsterEventType, DefaultRunLauncher

    if not isinstance(instance.run_launcher, DefaultRunLauncher):  # a pod or a container: not ours to check
        return None
    for record in instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT)[:5]:
        data = record.dagster_event.event_specific_data if record.dagster_event else None
        pid = getattr(data, "metadata", {}).get("pid")
        if pid is not None:
            return int(pid.value)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    try:  # a killed child its parent has not reaped yet is a zombie: gone all the same
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


@sensor(default_status=DefaultSensorStatus.RUNNING, minimum_interval_seconds=60,
        description="Every minute: a run of this machine whose process is gone (killed, crashed) is marked failed, "
                    "and its candidate's MLflow run ends FAILED, so the queue and the sensors go on.")
def dead_run_sensor(context: SensorEvaluationContext, registry: ModelRegistry):
    dead = fail_dead_runs(context.instance, registry)
    return SkipReason(f"marked {len(dead)} dead run(s) failed: {dead}" if dead else "no dead run")
