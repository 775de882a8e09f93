"""`rmi ui` serves the Dagster UI on 127.0.0.1 with the loop's graph and the history of the last run."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ui(loop_home, tmp_path):
    port = free_port()
    env = dict(os.environ, RMI_HOME=str(loop_home["home"]))
    env.pop("DAGSTER_HOME", None)
    rmi = Path(sys.executable).parent / "rmi"
    proc = subprocess.Popen([str(rmi), "ui", "--port", str(port)], env=env, start_new_session=True,
                            stdout=open(tmp_path / "ui.log", "w"), stderr=subprocess.STDOUT,
                            cwd=Path(__file__).resolve().parent.parent)

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
                    raise AssertionError((tmp_path / "ui.log").read_text()[-3000:]) from None
                time.sleep(1)
        yield graphql
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # dagster dev shuts its children down on SIGINT
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_ui_shows_the_graph_and_the_runs_of_the_loop(ui):
    assets = {n["assetKey"]["path"][0] for n in ui("{ assetNodes { assetKey { path } } }")["assetNodes"]}
    assert {"feedback_batch", "feedback_events", "training_dataset", "candidate_model", "candidate_evaluation",
            "champion"} <= assets
    runs = ui("{ runsOrError { ... on Runs { results { jobName status } } } }")["runsOrError"]["results"]
    jobs = sorted(r["jobName"] for r in runs if r["status"] == "SUCCESS")
    assert jobs.count("improvement_cycle") >= 2 and "ingest_feedback" in jobs
    sensors = ui("{ repositoriesOrError { ... on RepositoryConnection { nodes { sensors { name sensorState "
                 "{ status } } } } } }")["repositoriesOrError"]["nodes"][0]["sensors"]
    assert {"name": "new_feedback_sensor", "sensorState": {"status": "RUNNING"}} in sensors
