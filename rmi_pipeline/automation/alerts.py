"""Alerts when a person must act: any failed run of the loop (a failed blocking check fails its run too), and the
outbox of alerts a webhook did not take, sent again until it does."""

from dagster import (
    DefaultSensorStatus,
    RunFailureSensorContext,
    SensorEvaluationContext,
    SkipReason,
    run_failure_sensor,
    sensor,
)

from ..resources.notifier import Notifier


@run_failure_sensor(default_status=DefaultSensorStatus.RUNNING,
                    description="Alerts a person (RMI_ALERT_WEBHOOK_URL, else the log) once for every failed run of "
                                "the loop, with its first error and a link to the run (a challenger held back by "
                                "the reward-hacking probes has its own alert).")
def run_failure_alert(context: RunFailureSensorContext, notifier: Notifier):
    from ..assets.probes import held_back

    run = context.dagster_run
    errors = [e.event_specific_data.error for e in context.get_step_failure_events()
              if e.event_specific_data and e.event_specific_data.error]
    if held_back(errors):  # a challenger the probes held back: candidate_evaluation raised that alert itself
        return
    steps = [error.message.strip().splitlines()[0] for error in errors]
    why = "; ".join(steps) or context.failure_event.message or "no message"
    notifier.notify("failure", f"{run.job_name} failed: {why[:500]}", key=f"failure-{run.run_id}", run_id=run.run_id,
                    actions={"rmi_ack": {}})


@sensor(default_status=DefaultSensorStatus.RUNNING, minimum_interval_seconds=60,
        description="Every minute: sends again the alerts the webhook did not take (down, refusing, an HTTP error), "
                    "so an outage of the chat delays an alert but never loses it.")
def alert_outbox(context: SensorEvaluationContext, notifier: Notifier):
    waiting = notifier.flush()
    return SkipReason(f"{waiting} alert(s) wait for the webhook" if waiting else "no alert waits")
