"""A server in a process of its own (the gateway; the simulated world's judge), for `rmi run`, `rmi simulate` and the
benches: started, waited for until it answers, and stopped by its own process id (SIGTERM first: it writes what its
log holds, then exits); if the process that started it is killed, it stops by itself (`--exit-with-parent`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_gateway(env: dict[str, str] | None = None, port: int | None = None, log_file: Path | None = None,
                    start_timeout: float = 120.0, args: tuple[str, ...] = ()):
    """Yields (url, process) of `rmi serve` on 127.0.0.1, once /healthz answers; `args`: more of its options
    (--upstream URL)."""
    port = port or free_port()
    out = open(log_file, "ab") if log_file else None  # noqa: SIM115 - closed below
    try:
        with running_server([sys.executable, "-m", "rmi_pipeline.cli.main", "serve", "--port", str(port),
                             "--exit-with-parent", *args], "rmi serve", port, env, out, start_timeout,
                            why=lambda: f"; its log: {log_file}" if log_file else "") as process:
            yield f"http://127.0.0.1:{port}", process
    finally:
        if out:
            out.close()


@contextmanager
def running_server(command: list[str], name: str, port: int, env: dict[str, str] | None = None, out=None,
                   start_timeout: float = 120.0, why: Callable[[], str] = lambda: ""):
    """Yields the process of `command`, a server on 127.0.0.1:`port`, once its /healthz answers, and stops it by its
    process id when the block ends. `out`: a binary file its output goes to (None: discarded); `why()`: what to add
    when it exits or never answers (where its log is)."""
    import httpx

    process = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=out or subprocess.DEVNULL,
                               stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with code {process.returncode} before it answered{why()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not answer on {url} within {start_timeout:.0f} s{why()}")
            time.sleep(0.2)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen, grace: float = 30.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def exit_with_parent() -> None:
    """In a server started with --exit-with-parent: once the process that started it is gone (a killed `rmi run` or
    test), stop as if told to, by SIGTERM, which lets uvicorn finish its requests; no server is left behind."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


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
