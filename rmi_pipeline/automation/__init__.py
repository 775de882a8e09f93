"""How the loop turns: jobs, sensors, schedules and alerts, and a sensor tick run in this process (in_process.py)."""

# sensors a person never pauses (`rmi chat`'s pause): alerts, and the one that frees the queue of dead runs
ALWAYS_ON = frozenset({"run_failure_alert", "alert_outbox", "dead_run_sensor"})
