"""Bulk work on the CPU spread over the machine's cores: a forked process per core, each on one torch thread.

A tiny model's operations are too small for torch's threads to share: an eval decoded about twice as fast in two
processes as on two threads (bench/cores.py). The children are forked after the model is loaded, so they share its
weights; each sends its results back as JSON (never pickle: they hold users' and eval text) and dies with its
parent, so a killed run leaves none behind. A process that serves (the gateway) or times answers in one process
limits itself to one (`limit_processes`).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import traceback
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import torch

_limit: int | None = None  # limit_processes(n): at most n, whatever the cores


def cores() -> int:
    """How many processes bulk work may use: the cores this process may run on, or the limit set."""
    available = len(os.sched_getaffinity(0))
    return available if _limit is None else min(_limit, available)


def limit_processes(n: int | None) -> int | None:
    """At most `n` processes for bulk work from now on (1: all of it in this process; None: a process per core);
    returns the limit before."""
    global _limit
    before, _limit = _limit, n
    return before


def in_processes(run: Callable, shares: Sequence) -> list:
    """[run(share) for share in shares] at once: the first share here, each other in a forked child; `run` returns
    what JSON carries. A child's failure is raised here with its traceback, and the other children are stopped."""
    children = [_fork(lambda share=share: run(share)) for share in shares[1:]]
    try:
        with one_thread():
            out = [run(shares[0])]
        while children:
            out.append(_result(*children.pop(0)))
    finally:
        for pid, reader in children:  # after a failure: the rest are stopped
            os.close(reader)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return out


@contextmanager
def one_thread():
    """torch on one thread while the other cores run the children."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _fork(work: Callable) -> tuple[int, int]:
    """(pid, read end of its pipe) of a child that runs `work` and writes its JSON (or its error) to the pipe."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid:
        os.close(writer)
        return pid, reader
    code = 0
    try:
        os.close(reader)
        _die_with_parent()
        torch.set_num_threads(1)
        payload = json.dumps({"ok": work()})
    except BaseException:  # noqa: BLE001 - the parent raises it with this traceback
        payload, code = json.dumps({"error": traceback.format_exc()}), 1
    try:
        with os.fdopen(writer, "w") as pipe:
            pipe.write(payload)
    finally:
        os._exit(code)  # never the parent's exit handlers or buffers


def _result(pid: int, reader: int):
    """What the child wrote, once it has ended."""
    with os.fdopen(reader) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not text:
        raise RuntimeError(f"a forked process (pid {pid}) ended without a result (wait status {status})")
    message = json.loads(text)
    if "error" in message:
        raise RuntimeError(f"a forked process failed:\n{message['error']}")
    return message["ok"]


def _die_with_parent() -> None:
    """SIGKILL this child when the process that forked it ends (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
