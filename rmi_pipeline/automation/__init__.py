"""How the loop turns: jobs, sensors, schedules and alerts, and a sensor tick run in this process (in_process.py)."""
