"""A gateway in a process of its own, for `rmi run`, `rmi simulate` and the benches: started, waited for until it
answers, and stopped by its own process id (SIGTERM first: it writes what its log holds, then exits); if the
process that started it is killed, it stops by itself (`--exit-with-parent`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_gateway(env: dict[str, str] | None = None, port: int | None = None, log_file: Path | None = None,
                    start_timeout: float = 120.0):
    """Yields (url, process) of `rmi serve` on 127.0.0.1, once /healthz answers."""
    import httpx

    port = port or free_port()
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 - closed below
    process = subprocess.Popen([sys.executable, "-m", "rmi_pipeline.cli.main", "serve", "--port", str(port),
                                "--exit-with-parent"],
                               env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if process.poll() is not None:
                where = f"; its log: {log_file}" if log_file else ""
                raise RuntimeError(f"rmi serve exited with code {process.returncode} before it answered{where}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"rmi serve did not answer on {url} within {start_timeout:.0f} s")
            time.sleep(0.2)
        yield url, process
    finally:
        stop(process)
        if log_file:
            out.close()


def stop(process: subprocess.Popen, grace: float = 30.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_ready(url: str, version: str | None, timeout: float = 120.0, canary: str | None = None) -> str:
    """Wait until the gateway answers with `version` (any version when None), and with `canary` for its share of
    users when one is given; returns the version it serves."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            ready = httpx.get(f"{url}/readyz", timeout=5).json()
            if ready.get("ready") and (version is None or ready["model_version"] == str(version)) and (
                    canary is None or ready.get("canary_version") == str(canary)):
                return ready["model_version"]
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the gateway at {url} did not serve model version {version} within {timeout:.0f} s")
        time.sleep(0.2)
