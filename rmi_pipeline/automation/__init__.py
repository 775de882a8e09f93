"""How the loop turns: jobs, sensors, schedules and alerts, and a sensor tick run in this process (in_process.py)."""

# what a person never pauses (`rmi chat`'s pause): alerts, the sensor that frees the queue of dead runs, and the
# deletions owed to users (a pause of the loop must not delay them)
ALWAYS_ON = frozenset({"run_failure_alert", "alert_outbox", "dead_run_sensor", "forget_sensor",
                       "retention_schedule"})
