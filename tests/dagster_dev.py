"""Start `rmi ui` (the webserver and the daemon) over an RMI_HOME on a free loopback port, stop it by pid."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dagster_dev(home: Path, log: Path, **env_extra: str):
    """Yields a GraphQL query function once the webserver answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"} | {"RMI_HOME": str(home), **env_extra}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rmi"), "ui", "--port", str(port)], env=env,
                            start_new_session=True, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT)

    def graphql(query: str) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                         headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(request, timeout=10).read())["data"]

    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                graphql("{ version }")
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(log.read_text()[-3000:]) from None
                time.sleep(1)
        graphql.port = port
        yield graphql
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # rmi ui, the webserver and the daemon shut their children down
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_for(condition, seconds: float, what: str, log: Path):
    """Poll `condition` until it returns something truthy; fail with the server log after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(2)
    raise AssertionError(f"no {what} within {seconds:.0f} s\n" + log.read_text()[-4000:])
