"""The simulated users, started as a program of their own (`python -m rmi_pipeline.world`): `rmi run` and
`rmi simulate` reach it only through what it prints, so the pipeline never imports the world it learns from."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager, suppress
from pathlib import Path

from .home import say


class Rounds:
    """The world's users, a round at a time: `round(cycle)` returns the batch files the gateway's closing flush
    wrote and what happened (queries, versions that answered, how often right, reactions)."""

    def __init__(self, process: subprocess.Popen, gateway_url: str, log_file: Path):
        self.process, self.gateway_url, self.log_file = process, gateway_url, log_file
        self.curated = self._read()["curated"]  # whether the curators had to write the eval suite

    def round(self, cycle: int) -> tuple[list[str], dict]:
        with suppress(BrokenPipeError):  # a world that has stopped: _read says so, with its exit code
            self.process.stdin.write(json.dumps({"cycle": cycle}) + "\n")
            self.process.stdin.flush()
        said = self._read()
        return said["batches"], said["stats"]

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            raise RuntimeError(f"the simulated world stopped (exit code {code}); its log: {self.log_file}")
        return json.loads(line)


def prepare(task: str, folder: Path) -> dict[str, str]:
    """What a team brings for `task`, written by the world into `folder`: the settings that point the loop at it."""
    done = subprocess.run([sys.executable, "-m", "rmi_pipeline.world", "prepare", "--task", task, "--folder",
                           str(folder)], capture_output=True, text=True, env=os.environ.copy())
    if done.returncode:
        raise RuntimeError(f"the world could not prepare the {task} task: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["env"]


@contextmanager
def rounds(gateway_url: str, log_file: Path, options: list[str] | None = None):
    """The world in rounds mode (`options`: its task and judge), its errors in `log_file`; stopped when the block
    ends (its stdin closed, then by its process id)."""
    with open(log_file, "ab") as log:
        process = _start(["rounds", "--gateway", gateway_url, *(options or [])], stdout=subprocess.PIPE, stderr=log)
        try:
            yield Rounds(process, gateway_url, log_file)
        finally:
            with suppress(BrokenPipeError):
                process.stdin.close()  # the world ends its round in progress and exits
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def live(gateway_url: str, options: list[str]) -> int:
    """The world landing batches until Ctrl-C (forwarded to it: the batch in flight lands first) or its --batches;
    its lines said here. Returns its exit code."""
    process = _start(["live", "--gateway", gateway_url, "--exit-with-parent", *options], stdout=subprocess.PIPE,
                     stderr=None)
    before = {sig: signal.signal(sig, lambda sig, _: process.send_signal(sig))
              for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for line in process.stdout:
            say(line.rstrip("\n"))
        return process.wait()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        if process.poll() is None:
            process.kill()
            process.wait()


def _start(args: list[str], **streams) -> subprocess.Popen:
    # a session of its own: a terminal's Ctrl-C reaches the command that started it, which decides what the world
    # does; stdin is its lifeline (closed when that command ends or is killed)
    return subprocess.Popen([sys.executable, "-m", "rmi_pipeline.world", *args], stdin=subprocess.PIPE, text=True,
                            env=os.environ.copy(), start_new_session=True, **streams)
