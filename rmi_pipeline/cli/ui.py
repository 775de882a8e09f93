"""`rmi ui`: Dagster's webserver and daemon over RMI_HOME, as two processes this one starts and stops.

Not `dagster dev`: Dagster 1.13 marks it superseded (by `dg dev`, which wants another project layout) and it
warns that the repository's dagster.yaml, the template RMI_HOME's is copied from, "will not be used". The daemon
runs with the sensor ticks that asked for nothing left out of its log: they were 2 in 3 of its lines; what it
launched, what failed and every warning stay.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from ..settings import Settings
from ..training.worker import stop_training_workers
from .home import prepare_home, say

QUIET_TICKS = ("Checking for new runs for sensor", "Checking for new runs for schedule", "Skipping ")


def ui(port: Annotated[int, typer.Option(help="Port of the web UI on 127.0.0.1.")] = 3000) -> int:
    """The Dagster web UI over RMI_HOME: every run, materialization and check, the lineage; sensors on."""
    settings = Settings()
    prepare_home(settings)
    target = ["-w", "workspace.yaml"] if Path("workspace.yaml").exists() else ["-m", "rmi_pipeline.definitions"]
    bin_dir = Path(sys.executable).parent
    commands = [[str(bin_dir / "dagster-webserver"), *target, "-h", "127.0.0.1", "-p", str(port)],
                [sys.executable, "-m", "rmi_pipeline.cli.ui", "run", *target]]
    say(f"Dagster UI on http://127.0.0.1:{port} over {settings.resolved_home} (Ctrl-C stops it)")
    procs = [subprocess.Popen(command) for command in commands]
    stopping = []

    def stop(*_):
        stopping.append(True)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # both shut down their children on SIGINT

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stopping and all(proc.poll() is None for proc in procs):
            time.sleep(0.5)
        stop()  # one of them ended by itself: the other goes too
        deadline = time.monotonic() + 30
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        stop_training_workers(settings.resolved_home)  # the runs' warm worker goes with the daemon that used it
    return 0 if stopping else max(proc.returncode or 0 for proc in procs) or 1


class _QuietTicks(logging.Filter):
    """Drops the sensor daemon's lines about ticks that asked for nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith(QUIET_TICKS) or (text.startswith("Sensor ") and " skipped" in text))


def _daemon(argv: list[str]) -> None:
    """Dagster's own daemon command (the `dagster-daemon` script's entry), with _QuietTicks on its sensor log."""
    from dagster._daemon.cli import main

    for name in ("dagster.daemon.SensorDaemon", "dagster.daemon.SchedulerDaemon"):
        logging.getLogger(name).addFilter(_QuietTicks())
    sys.argv = ["dagster-daemon", *argv]
    main()


if __name__ == "__main__":
    _daemon(sys.argv[1:])
