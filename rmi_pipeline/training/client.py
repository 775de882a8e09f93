"""The warm worker's client: what the launcher runs for a candidate by default, in place of the training program.

    python -m rmi_pipeline.training.client      (candidate_model's command by default; never by hand)

It connects to the warm worker of this home and environment (starting one if none answers), hands over its
environment, working folder and standard streams, and waits: the worker forks the training program for it. The
client exits with the program's status; SIGINT or SIGTERM to the client goes to the program; a client that dies
takes its program with it (the worker sees its connection close). Whatever keeps the warm path from working (a
worker that does not start, CUDA already initialized there) runs the training program cold in the client instead:
slower, never different.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import PROGRAM as COLD
from .protocol import FOLDER, IDLE, connect, receive, send, socket_path, worker_key

COMMAND = [sys.executable, "-m", "rmi_pipeline.training.client"]  # what the launcher runs
WORKER = [sys.executable, "-m", "rmi_pipeline.training.worker"]
START_SECONDS = 180.0  # a worker that has not answered by then is given up on: the client trains cold


def client() -> int:
    env = dict(os.environ)
    child, caught = None, []

    def forward(signum, _frame):  # a signal before the child is known is kept and sent once it is
        if child is None:
            caught.append(signum)
        else:
            _signal(child, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        conn = _reach(env)
    except OSError as exc:
        return _cold(f"no warm training worker ({exc})", caught)
    send(conn, {"env": env, "cwd": os.getcwd()}, [0, 1, 2])
    reply, _ = receive(conn)
    if not reply or "pid" not in reply:
        return _cold((reply or {}).get("cold", "the warm training worker closed the connection"), caught)
    child = reply["pid"]  # Python runs signal handlers between statements: each signal is sent once
    for signum in caught:
        _signal(child, signum)
    reply, _ = receive(conn)  # a signal's handler runs and the read goes on (PEP 475)
    if reply is None:  # the worker died under its child
        print("training worker: lost the worker while training", file=sys.stderr)
        return 1
    return reply["exit"]


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _cold(reason: str, caught: list[int]) -> int:
    if caught:  # stopped before any training began
        print(f"training worker: stopped by signal {caught[0]} before training", file=sys.stderr)
        return 128 + caught[0]
    print(f"training worker: {reason}; training cold instead", file=sys.stderr, flush=True)
    os.execv(COLD[0], COLD)


def warm_up(env: dict[str, str]) -> threading.Thread:
    """Starts the worker of `env` in the background if none answers, so a client that comes later finds it warm;
    whatever keeps it from starting is left to that client, which then trains cold."""

    def reach() -> None:
        with contextlib.suppress(OSError):
            _reach(env).close()  # a connection that sends nothing: the worker reads it as no request

    thread = threading.Thread(target=reach, name="training-worker-warm-up", daemon=True)
    thread.start()
    return thread


def _reach(env: dict[str, str]) -> socket.socket:
    """The connection to this environment's worker, started if none answers (one start at a time per key)."""
    import fcntl

    key = worker_key(env)
    path = socket_path(key)
    try:
        return connect(path)
    except OSError:
        pass
    folder = Path(env[FOLDER])
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return connect(path)
        except OSError:
            pass
        with open(folder / f"{key}.log", "ab") as log:
            worker = subprocess.Popen([*WORKER, "--serve", path],
                                      env={k: v for k, v in env.items() if not k.startswith("DAGSTER_PIPES_")},
                                      stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise OSError(f"the worker exited with {worker.returncode}: see {folder / f'{key}.log'}")
            try:
                return connect(path)
            except OSError:
                time.sleep(0.05)
        raise OSError(f"the worker did not answer within {START_SECONDS:.0f} s")


def main() -> int:
    if FOLDER not in os.environ or IDLE not in os.environ:
        print("the training client runs under Dagster Pipes: materialize candidate_model instead", file=sys.stderr)
        return 2
    return client()


if __name__ == "__main__":
    sys.exit(main())
