"""Nothing lost, nothing stuck: a kill between the writes of a promotion or a rollback, a webhook that is down."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from webhook import serve_hook

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources.notifier import Notifier
from rmi_pipeline.resources.registry import CHAMPION, ModelRegistry
from rmi_pipeline.settings import DEFAULT_RECIPE

# Runs one promotion or rollback in a process of its own that SIGKILLs itself just before its N-th write to MLflow.
KILLED_AT = """
import os, signal, sys
from mlflow import MlflowClient
from rmi_pipeline.resources.registry import ModelRegistry

tracking, artifacts, action, kill_at, version = sys.argv[1:6]
writes = 0
for name in ("set_registered_model_tag", "set_registered_model_alias", "set_model_version_tag"):
    def write(self, *args, _original=getattr(MlflowClient, name), **kwargs):
        global writes
        writes += 1
        if writes == int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
        return _original(self, *args, **kwargs)
    setattr(MlflowClient, name, write)
registry = ModelRegistry(tracking_uri=tracking, artifact_root=artifacts, model_name="m")
registry.promote(version, {"promoted_by": "gate"}) if action == "promote" else registry.rollback({"by": "a person"})
print("WRITES", writes)
"""


@pytest.fixture(scope="module")
def three_versions(tmp_path_factory):
    """A registry with versions 1-3, where 1 then 2 have been champion."""
    root = tmp_path_factory.mktemp("registry")
    registry = ModelRegistry(tracking_uri=f"sqlite:///{root / 'mlflow.db'}", artifact_root=f"file://{root / 'art'}",
                             model_name="m")
    weights = ArithmeticRecipe().checkpoint(ArithmeticRecipe().build_model(0.0, 1))
    for _ in range(3):
        with registry.run("candidate", tags={}) as run_id:
            registry.register_model(run_id, weights, DEFAULT_RECIPE, tags={})
    registry.promote("1", {"promoted_by": "gate"})
    registry.promote("2", {"promoted_by": "gate"})
    return root


def killed(root: Path, action: str, kill_at: int, version: str = "3") -> tuple[int, str]:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    out = subprocess.run([sys.executable, "-c", KILLED_AT, f"sqlite:///{root / 'mlflow.db'}",
                          f"file://{root / 'art'}", action, str(kill_at), version], capture_output=True, text=True,
                         env=env, timeout=120)
    return out.returncode, out.stdout


def copy_of(root: Path, tmp_path: Path) -> tuple[Path, ModelRegistry]:
    here = tmp_path / "registry"
    shutil.copytree(root, here)
    return here, ModelRegistry(tracking_uri=f"sqlite:///{here / 'mlflow.db'}", artifact_root=f"file://{here / 'art'}",
                               model_name="m")


def consistent(registry: ModelRegistry) -> list[str]:
    """The history of champions, which the champion ends."""
    history = registry.champion_history()
    assert history[-1] == str(registry.version(CHAMPION).version)
    return history


@pytest.mark.parametrize("kill_at", [1, 2, 3, 4])
def test_a_promotion_killed_before_any_of_its_writes_leaves_a_whole_history_and_rollback_works(three_versions,
                                                                                            tmp_path, kill_at):
    root, registry = copy_of(three_versions, tmp_path)
    code, _ = killed(root, "promote", kill_at)
    assert code == -signal.SIGKILL
    history = consistent(registry)
    assert history in (["1", "2"], ["1", "2", "3"])  # before or after the one alias write, nothing in between
    tagged = "promoted_by" in registry.client().get_model_version("m", "3").tags
    assert not tagged or history[-1] == "3"  # a version is tagged as promoted only once it serves
    registry.promote("3", {"promoted_by": "gate"})  # the recovery: promote again
    assert consistent(registry) == ["1", "2", "3"]
    assert registry.rollback({"by": "test"}) == ("3", "2") and consistent(registry) == ["1", "2"]


def test_a_promotion_writes_four_times_and_a_rollback_three(three_versions, tmp_path):
    """The kill points above cover every write: if a write is added, the tests must name it."""
    root, _ = copy_of(three_versions, tmp_path)
    assert killed(root, "promote", 0)[1].split() == ["WRITES", "4"]
    assert killed(root, "rollback", 0)[1].split() == ["WRITES", "3"]


def test_a_rollback_killed_between_its_alias_move_and_its_history_write_leaves_a_whole_history(three_versions,
                                                                                                 tmp_path):
    root, registry = copy_of(three_versions, tmp_path)
    assert killed(root, "rollback", 2)[0] == -signal.SIGKILL  # the alias moved; the history tag still says 1, 2
    assert consistent(registry) == ["1"] and str(registry.version(CHAMPION).version) == "1"


def test_an_alert_to_a_webhook_that_is_down_waits_in_the_outbox_and_is_sent_when_it_is_back(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    secret = f"http://127.0.0.1:{port}/services/T000/B000/secret-token"
    notifier = Notifier(webhook_url=secret, state_path=str(tmp_path / "alerts.json"))
    assert notifier.notify("promotion", "champion v1 -> v2", key="promotion-2")  # does not raise
    waiting = notifier.undelivered()
    assert list(waiting) == ["promotion-2"] and waiting["promotion-2"]["tries"] == 1
    assert "secret-token" not in str(waiting) and "Connection refused" in waiting["promotion-2"]["last_error"]
    assert not notifier.notify("promotion", "champion v1 -> v2", key="promotion-2")  # raised once, not twice

    bodies: list = []
    server = serve_hook(bodies, port=port)
    try:
        assert notifier.flush() == 0
    finally:
        server.shutdown()
    assert [b["text"] for b in bodies] == ["[rmi promotion] champion v1 -> v2"]
    assert notifier.undelivered() == {} and notifier.flush() == 0 and len(bodies) == 1


def test_a_webhook_that_fails_once_gets_the_alert_on_the_next_try_of_the_same_delivery(tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    answers, bodies = [503, 200], []

    class Flaky(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(answers.pop(0))
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        notifier = Notifier(webhook_url=f"http://127.0.0.1:{server.server_port}/hook",
                            state_path=str(tmp_path / "alerts.json"), timeout_seconds=5)
        assert notifier.notify("failure", "ingest_feedback failed", key="failure-1", run_id="r1234567890")
    finally:
        server.shutdown()
    assert len(bodies) == 2 and bodies[0] == bodies[1] and notifier.undelivered() == {}  # retried, then taken
