"""Bulk work spread over the cores (ml/cores.py): results in order, a child's failure raised with its cause, and no
child left behind, whether the work fails or the process that forked them is killed."""

import os
import signal
import subprocess
import sys
import time

import pytest

from rmi_pipeline.ml import cores


def _gone(pid: int) -> bool:
    """Not running: no such process, or one that ended and waits to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except FileNotFoundError:
        return True


def test_each_share_runs_in_its_own_process_and_comes_back_in_order():
    shares = [[0, 1], [2], [3, 4, 5]]
    out = cores.in_processes(lambda share: [[i, os.getpid()] for i in share], shares)
    assert [[i for i, _ in part] for part in out] == shares
    assert out[0][0][1] == os.getpid() and len({part[0][1] for part in out}) == 3


def test_a_childs_failure_is_raised_with_its_cause_and_no_child_is_left(monkeypatch):
    forked = []
    monkeypatch.setattr(cores, "_fork", lambda work, f=cores._fork: forked.append(f(work)) or forked[-1])

    def run(share):
        if share == "bad":
            raise ValueError("this share cannot be decoded")
        time.sleep(0.5 if share == "slow" else 0)
        return share

    with pytest.raises(RuntimeError, match="this share cannot be decoded"):
        cores.in_processes(run, ["here", "bad", "slow"])
    assert len(forked) == 2 and all(_gone(pid) for pid, _ in forked)


def test_the_limit_keeps_bulk_work_in_as_many_processes(monkeypatch):
    monkeypatch.setattr(cores, "_limit", None)  # as a process that does not serve (a gateway in this one limits it)
    assert cores.cores() == len(os.sched_getaffinity(0))
    assert cores.limit_processes(1) is None and cores.cores() == 1
    assert cores.limit_processes(None) == 1 and cores.cores() == len(os.sched_getaffinity(0))


def test_the_children_die_with_a_killed_parent(tmp_path):
    """A run killed mid-eval (kill -9) leaves no decoding process running on."""
    program = f"""
import os, time
from rmi_pipeline.ml import cores
def run(share):
    open(os.path.join({str(tmp_path)!r}, str(os.getpid())), "w").close()
    time.sleep(60)
cores.in_processes(run, [0, 1, 2])
"""
    parent = subprocess.Popen([sys.executable, "-c", program])
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.iterdir())) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        children = [int(p.name) for p in tmp_path.iterdir() if int(p.name) != parent.pid]
        assert len(children) == 2
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(pid) for pid in children)
