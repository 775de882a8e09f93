"""`rmi ui`: Dagster's webserver and daemon over RMI_HOME, and the one code server both read, as three processes
this one starts and stops.

Not `dagster dev`: Dagster 1.13 marks it superseded (by `dg dev`, which wants another project layout) and it
warns that the repository's dagster.yaml, the template RMI_HOME's is copied from, "will not be used". One
long-lived code server (`dagster code-server start`) serves the loop's definitions: the daemon's own would be
replaced every minute, and a run it launched against the one being stopped failed. The daemon runs with the sensor
ticks that asked for nothing left out of its log: they were 2 in 3 of its lines; what it launched, what failed and
every warning stay.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from ..settings import Settings
from ..training.worker import stop_training_workers
from .home import prepare_home, say

QUIET_TICKS = ("Checking for new runs for sensor", "Checking for new runs for schedule", "Skipping ")


LOCATION = "rmi_pipeline.definitions"  # the code location's name in the UI and in GraphQL selectors
CODE_SERVER_START_SECONDS = 120.0  # importing the loop's definitions on a loaded machine


def ui(port: Annotated[int, typer.Option(help="Port of the web UI on 127.0.0.1.")] = 3000) -> int:
    """The Dagster web UI over RMI_HOME: every run, materialization and check, the lineage; sensors on."""
    settings = Settings()
    prepare_home(settings)
    bin_dir = Path(sys.executable).parent
    folder = Path(tempfile.mkdtemp(prefix="rmi-ui-"))  # a short path: a unix socket's is at most 107 bytes
    socket_path, workspace = folder / "code.sock", folder / "workspace.yaml"
    workspace.write_text(json.dumps({"load_from": [{"grpc_server": {"socket": str(socket_path),
                                                                    "location_name": LOCATION}}]}))  # JSON is YAML
    procs = [subprocess.Popen([str(bin_dir / "dagster"), "code-server", "start", "-m", LOCATION,
                               "--location-name", LOCATION, "--socket", str(socket_path)])]
    stopping = []

    def stop(*_):
        stopping.append(True)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # each shuts its children down on SIGINT

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if _serving(socket_path, procs[0], stopping):
            say(f"Dagster UI on http://127.0.0.1:{port} over {settings.resolved_home} (Ctrl-C stops it)")
            target = ["-w", str(workspace)]
            procs += [subprocess.Popen(command) for command in (
                [str(bin_dir / "dagster-webserver"), *target, "-h", "127.0.0.1", "-p", str(port)],
                [sys.executable, "-m", "rmi_pipeline.cli.ui", "run", *target])]
        while not stopping and all(proc.poll() is None for proc in procs):
            time.sleep(0.5)
        stop()  # one of them ended by itself: the others go too
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
        shutil.rmtree(folder, ignore_errors=True)
        stop_training_workers(settings.resolved_home)  # the runs' warm worker goes with the daemon that used it
    return 0 if stopping else max(proc.returncode or 0 for proc in procs) or 1


def _serving(socket_path: Path, server: subprocess.Popen, stopping: list) -> bool:
    """Waits until the code server lists the loop's definitions (False: it exited, or Ctrl-C): the webserver and
    the daemon started before it would show the location as failed and look again only a minute later."""
    from dagster._grpc.client import DagsterGrpcClient

    client = DagsterGrpcClient(socket=str(socket_path))
    deadline = time.monotonic() + CODE_SERVER_START_SECONDS
    while not stopping and server.poll() is None:
        try:
            client.list_repositories()
            return True
        except Exception:  # not listening yet, or still importing the definitions
            if time.monotonic() > deadline:
                say(f"the code server did not serve the loop's definitions within {CODE_SERVER_START_SECONDS:.0f} s")
                return False
            time.sleep(0.5)
    return False


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
