"""`rmi chat`, the Slack app: signed requests against it on 127.0.0.1, acting on a real MLflow registry and a real
Dagster webserver and daemon (`rmi ui`); every refusal leaves the champion where it was."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch
from conftest import FAST
from dagster_dev import dagster_dev, free_port
from slack import click, slash
from webhook import serve_hook

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources
from rmi_pipeline.resources.registry import CHAMPION
from rmi_pipeline.settings import DEFAULT_RECIPE, Settings

SECRET = "8f2b1c-test-signing-secret"
TOKEN = "xoxb-test-bot-token-0000"
ALLOWED, STRANGER = "U0ALLOWED", "U0STRANGER"


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    """A home with models v1-v3 (v1 then v2 promoted), `rmi ui` over it, and `rmi chat` pointed at both."""
    home = tmp_path_factory.mktemp("chat") / "home"
    env = {**FAST, "RMI_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "RMI_SLACK_SIGNING_SECRET": SECRET,
           "RMI_SLACK_BOT_TOKEN": TOKEN, "RMI_SLACK_ALLOWED_USERS": f"{ALLOWED}, U0OTHER"}
    replies: list = []
    receiver = serve_hook(replies)  # where Slack's response_url would take the replies
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        from rmi_pipeline.cli.home import prepare_home

        settings = Settings()
        prepare_home(settings)
        registry = build_resources(settings)["registry"]
        recipe = ArithmeticRecipe()
        torch.manual_seed(0)
        with registry.run("chat", tags={}) as run_id:
            for _ in range(3):
                registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)), DEFAULT_RECIPE,
                                        tags={})
        registry.promote("1", {"promoted_by": "test"})
        registry.promote("2", {"promoted_by": "test"})
        ui_log, chat_log = home / "ui.log", home / "chat.log"
        with dagster_dev(home, ui_log) as graphql:
            port = free_port()
            mp.setenv("RMI_UI_URL", f"http://127.0.0.1:{graphql.port}")
            proc = subprocess.Popen([str(Path(sys.executable).parent / "rmi"), "chat", "--port", str(port)],
                                    env={**os.environ}, stdout=open(chat_log, "w"), stderr=subprocess.STDOUT,
                                    start_new_session=True)
            url = f"http://127.0.0.1:{port}"
            try:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        httpx.get(f"{url}/healthz", timeout=2).raise_for_status()
                        break
                    except httpx.HTTPError:
                        assert proc.poll() is None and time.monotonic() < deadline, chat_log.read_text()
                        time.sleep(0.3)
                yield {"url": url, "settings": Settings(), "registry": registry, "graphql": graphql,
                       "replies": replies, "hook": f"http://127.0.0.1:{receiver.server_port}/response",
                       "log": chat_log, "home": home}
            finally:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
    receiver.shutdown()


def champion(chat) -> str:
    return str(chat["registry"].version(CHAMPION).version)


def reply_to(chat, count: int, seconds: float = 30) -> dict:
    """The reply posted to response_url once `count` have arrived."""
    deadline = time.monotonic() + seconds
    while len(chat["replies"]) < count:
        assert time.monotonic() < deadline, f"no reply on response_url: {chat['log'].read_text()[-2000:]}"
        time.sleep(0.1)
    return chat["replies"][count - 1]


def command(chat, text: str, user: str = ALLOWED) -> tuple[dict, dict | None]:
    """`/rmi text`: its acknowledgement, and the reply that followed it (None for a refusal in the ack)."""
    before = len(chat["replies"])
    ack = slash(chat["url"], SECRET, text, user, chat["hook"])
    assert ack.status_code == 200, ack.text
    body = ack.json()
    if not body.get("text", "").startswith("Working on"):
        return body, None
    return body, reply_to(chat, before + 1)


def audited(chat) -> list[dict]:
    from rmi_pipeline.chat.audit import read

    return read(chat["settings"])


def test_requests_slack_did_not_sign_or_that_are_replayed_are_refused_and_nothing_moves(chat):
    before = champion(chat)
    forged = slash(chat["url"], SECRET, "promote 3 forged", ALLOWED, chat["hook"], sign_with="not-the-secret")
    replayed = slash(chat["url"], SECRET, "promote 3 replayed", ALLOWED, chat["hook"],
                     timestamp=int(time.time()) - 6 * 60)
    assert forged.status_code == replayed.status_code == 401
    assert champion(chat) == before and not any("forged" in a["text"] or "replayed" in a["text"]
                                                for a in audited(chat))


@pytest.mark.parametrize(("user", "text", "refusal"), [
    (STRANGER, "promote 3 I want it", "slack:U0STRANGER (name-U0STRANGER) may not `promote`"),
    (ALLOWED, "deploy everything", "I do not know `deploy everything`"),
    (ALLOWED, "promote 3", "promote needs a reason"),
    (ALLOWED, "promote three because", "a model version is a number, not 'three'"),
    (ALLOWED, "promote 99 it is better", "has no version 99"),
    (ALLOWED, "promote 2 again", "v2 is already the champion"),
    (ALLOWED, "rollback", "rollback needs a reason"),
    (ALLOWED, "cycle bogus/x", "not a slice of this recipe: bogus/x"),
    (ALLOWED, "canary abort it looks bad", "no canary is on trial"),
    (STRANGER, "generation small", "slack:U0STRANGER (name-U0STRANGER) may not `generation`"),
    (STRANGER, "stop generation it costs too much", "slack:U0STRANGER (name-U0STRANGER) may not `stop`"),
    (ALLOWED, "generation", "generation needs one size"),
    (ALLOWED, "generation <!channel>", "not a model size: '&lt;!channel&gt;'"),
    (ALLOWED, "derivative", "a derivative needs a size"),  # RMI_DERIVATIVE_SIZE is unset
    (ALLOWED, "stop everything", "stop what?"),
    (ALLOWED, "stop derivative", "stop derivative needs a reason"),
    (ALLOWED, "stop derivative it is too slow", "no derivative run is queued or running: nothing was stopped"),
])
def test_a_refused_request_says_why_is_audited_and_moves_nothing(chat, user, text, refusal):
    before, history = champion(chat), chat["registry"].champion_history()
    ack, reply = command(chat, text, user)
    said = (reply or ack)["text"]
    assert refusal in said and said.startswith((":x:", ":no_entry:")), said
    assert champion(chat) == before and chat["registry"].champion_history() == history
    last = audited(chat)[-1]
    assert last["user"] == user and last["text"] == text and last["outcome"] == "refused"


def test_status_answers_anyone_with_the_models_the_canary_and_the_cycles(chat):
    ack, reply = command(chat, "status", STRANGER)
    assert ack["response_type"] == "ephemeral" and reply["response_type"] == "ephemeral"
    shown = json.dumps(reply["blocks"])
    assert f"*Champion* v{champion(chat)}" in shown and "*Canary* none" in shown


def test_promote_and_rollback_move_the_alias_through_the_audited_path(chat):
    registry = chat["registry"]
    start = champion(chat)
    _, reply = command(chat, "promote 3 users asked for the new tiers")
    assert champion(chat) == "3" and reply["response_type"] == "in_channel"
    assert f"Champion v{start} -> v3, promoted by slack:{ALLOWED} (name-{ALLOWED})" in reply["text"]
    tags = registry.client().get_model_version(registry.model_name, "3").tags
    assert tags["override_by"] == f"slack:{ALLOWED} (name-{ALLOWED})" and tags["override_via"] == "Slack"
    assert tags["override_reason"] == "users asked for the new tiers"
    _, reply = command(chat, "rollback v3 answers wrong for the partner")
    assert champion(chat) == start and "rolled back" in reply["text"]
    done = [a for a in audited(chat) if a["outcome"] == "done"][-2:]
    assert [a["text"] for a in done] == ["promote 3 users asked for the new tiers",
                                         "rollback v3 answers wrong for the partner"]


def test_a_button_on_an_alert_acts_and_the_alert_says_who_acted(chat, tmp_path):
    from rmi_pipeline.resources.notifier import Notifier

    posted: list = []
    hook = serve_hook(posted)
    notifier = Notifier(webhook_url=f"http://127.0.0.1:{hook.server_port}/alerts",
                        state_path=str(tmp_path / "sent.json"))
    command(chat, "promote 3 try it")
    notifier.notify("budget", "champion v3 regressed on add/4; 3 targeted cycles did not fix it.", key="budget-v3",
                    actions={"rmi_rollback": {}, "rmi_cycle": {"slices": ["add/4"]}, "rmi_ack": {}})
    hook.shutdown()
    [alert] = posted
    assert [b["action_id"] for b in alert["blocks"][-1]["elements"]] == ["rmi_rollback", "rmi_cycle", "rmi_ack"]
    message = {"type": "message", "text": alert["text"], "blocks": alert["blocks"]}
    rollback = alert["blocks"][-1]["elements"][0]
    n = len(chat["replies"])
    refused = click(chat["url"], SECRET, STRANGER, rollback["action_id"], json.loads(rollback["value"]), message,
                    chat["hook"])
    assert refused.status_code == 200 and "may not act on alerts" in reply_to(chat, n + 1)["text"]
    assert champion(chat) == "3"
    clicked = click(chat["url"], SECRET, ALLOWED, rollback["action_id"], json.loads(rollback["value"]), message,
                    chat["hook"])
    assert clicked.status_code == 200
    updated = reply_to(chat, n + 2)
    assert champion(chat) == "2" and updated["replace_original"] is True
    assert f"rolled back by slack:{ALLOWED}" in updated["text"]
    assert not [b for b in updated["blocks"] if b["type"] == "actions"]  # the buttons are gone: it was acted on
    tags = chat["registry"].client().get_model_version(chat["registry"].model_name, "2").tags
    assert tags["override_reason"] == "Roll back, from budget-v3"


@contextlib.contextmanager
def daemon_marking_ticks(lag: float = 0.2):
    """As the sensor daemon marks its ticks with the states it read when its iteration began: read the running
    sensors' states, and once a stop has landed, write them back `lag` seconds later (undoing the stops)."""
    from dagster import DagsterInstance
    from dagster._core.scheduler.instigation import InstigatorType

    instance, done = DagsterInstance.get(), threading.Event()

    def running():
        return [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR) if s.is_running]

    read = running()

    def mark() -> None:
        while len(running()) == len(read):
            if done.is_set():  # nothing was stopped
                return
            time.sleep(0.02)
        time.sleep(lag)
        for state in read:
            instance.update_instigator_state(state)

    marker = threading.Thread(target=mark)
    marker.start()
    try:
        yield
    finally:
        done.set()
        marker.join()


def test_pause_stops_the_loop_s_sensors_resume_starts_them_and_a_cycle_runs_aimed_at_its_slices(chat):
    def states() -> dict[str, str]:
        data = chat["graphql"]("{ workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError { "
                               "... on RepositoryLocation { repositories { sensors { name sensorState { status } } "
                               "schedules { name scheduleState { status } } } } } } } } }")
        repo = data["workspaceOrError"]["locationEntries"][0]["locationOrLoadError"]["repositories"][0]
        return ({s["name"]: s["sensorState"]["status"] for s in repo["sensors"]}
                | {s["name"]: s["scheduleState"]["status"] for s in repo["schedules"]})

    with daemon_marking_ticks():  # as the sensor daemon does, racing the stops
        _, reply = command(chat, "pause")
    off = states()
    assert "The loop is paused" in json.dumps(reply["blocks"])
    assert off["enough_feedback_sensor"] == off["new_feedback_sensor"] == off["health_schedule"] == "STOPPED"
    assert off["run_failure_alert"] == off["dead_run_sensor"] == "RUNNING"  # alerts stay on
    command(chat, "resume")
    assert set(states().values()) == {"RUNNING"}
    _, reply = command(chat, "cycle add/4 sub/3")
    run_id = reply["blocks"][-1]["elements"][0]["text"].split("Dagster run ")[1].rstrip(">")
    from dagster import DagsterInstance

    runs = [r for r in DagsterInstance.get().get_runs() if r.run_id.startswith(run_id)]
    assert len(runs) == 1 and runs[0].job_name == "improvement_cycle"
    assert runs[0].tags["rmi/trigger"] == "chat" and runs[0].tags["rmi/focus"] == "add/4, sub/3"
    assert runs[0].run_config["ops"]["candidate_model"]["config"]["focus"] == ["add/4", "sub/3"]


def test_a_canary_aborted_from_chat_ends_its_trial_and_says_so_in_the_registry_and_in_dagster(chat):
    from dagster import DagsterInstance

    from rmi_pipeline.assets import canary_verdict
    from rmi_pipeline.resources.registry import CANARY

    registry = chat["registry"]
    registry.start_canary("3", {"canary_started_at": str(time.time())})
    _, shown = command(chat, "status")
    assert "*Canary* v3 on trial, 10% of users: no verdict yet" in json.dumps(shown["blocks"])
    _, reply = command(chat, "canary abort the partner's users complain")
    assert registry.version(CANARY) is None and champion(chat) == "2"
    assert reply["text"] == f"Canary v3 aborted by slack:{ALLOWED} (name-{ALLOWED}): the partner's users complain"
    tags = registry.client().get_model_version(registry.model_name, "3").tags
    assert tags["canary_outcome"] == "aborted" and tags["override_via"] == "Slack"
    [event] = DagsterInstance.get().fetch_materializations(canary_verdict.key, limit=1).records
    assert event.asset_materialization.metadata["verdict"].value == "abort"


def test_a_new_generation_and_a_derivative_start_from_chat_show_in_status_and_stop_from_chat(chat):
    from dagster import DagsterInstance, DagsterRunStatus

    from rmi_pipeline.definitions import build_definitions

    instance, who = DagsterInstance.get(), f"slack:{ALLOWED} (name-{ALLOWED})"

    def run(reply) -> object:
        run_id = reply["blocks"][-1]["elements"][0]["text"].split("Dagster run ")[1].rstrip(">")
        [found] = [r for r in instance.get_runs() if r.run_id.startswith(run_id)]
        return found

    # a run holding the one run slot (dagster.yaml), so that what chat launches stays queued until it is stopped
    holder = instance.create_run_for_job(build_definitions(chat["settings"]).resolve_job_def("health_check"),
                                         status=DagsterRunStatus.STARTED)
    try:
        _, reply = command(chat, "generation small")
        assert reply["response_type"] == "in_channel"
        assert reply["text"].startswith(f"Started a new generation at size small, taught by champion "
                                        f"v{champion(chat)}, for {who}: run ")
        generation = run(reply)
        assert generation.job_name == "improvement_cycle" and generation.status == DagsterRunStatus.QUEUED
        assert generation.run_config["ops"]["candidate_model"]["config"] == {"size": "small", "taught": True}
        assert {k: generation.tags[k] for k in ("rmi/trigger", "rmi/generation_size", "rmi/requested_by")} == {
            "rmi/trigger": "generation", "rmi/generation_size": "small", "rmi/requested_by": who}
        derivative = run(command(chat, "derivative micro")[1])
        assert derivative.job_name == "derivative" and derivative.tags["rmi/derivative_size"] == "micro"
        assert derivative.run_config["ops"]["fast_candidate"]["config"] == {"size": "micro", "taught": True}
        _, shown = command(chat, "status")
        listed = next(b["text"]["text"] for b in shown["blocks"]
                      if b["text"]["text"].startswith("*New generations and derivatives*"))
        assert f"|{derivative.run_id[:8]}> derivative at size micro: queued, started by {who}" in listed
        assert f"|{generation.run_id[:8]}> new generation at size small: queued, started by {who}" in listed
        _, reply = command(chat, "stop generation the budget is better spent on data")
        assert reply["text"] == (f"Stopped generation run {generation.run_id[:8]} (queued), by {who}: the budget is "
                                 "better spent on data")
        assert instance.get_run_by_id(generation.run_id).status == DagsterRunStatus.CANCELED
        assert instance.get_run_by_id(derivative.run_id).status == DagsterRunStatus.QUEUED  # another kind: kept
        _, refused = command(chat, "stop generation again")
        assert refused["text"] == ":x: no generation run is queued or running: nothing was stopped"
        command(chat, "stop derivative not today")
        assert instance.get_run_by_id(derivative.run_id).status == DagsterRunStatus.CANCELED
    finally:
        instance.delete_run(holder.run_id)
    acted = [(a["text"], a["outcome"]) for a in audited(chat)[-5:]]
    assert acted == [("generation small", "done"), ("derivative micro", "done"),
                     ("stop generation the budget is better spent on data", "done"),
                     ("stop generation again", "refused"), ("stop derivative not today", "done")]


def test_untrusted_text_cannot_mention_the_channel_or_forge_a_link_in_a_reply(chat):
    ack, _ = command(chat, "<!channel> see <https://evil.example|the run>")
    assert ack["text"].startswith(":x: I do not know `&lt;!channel&gt; see &lt;https://evil.example|the run&gt;`")
    _, reply = command(chat, "promote 3 <!channel> it is better")
    assert "<!channel>" not in json.dumps(reply) and "&lt;!channel&gt; it is better" in reply["text"]
    command(chat, "rollback undo the test's promotion")


def test_the_signing_secret_and_the_token_are_never_logged(chat):
    command(chat, f"promote 2 {SECRET}")  # even a user who pastes it does not make the server log it
    logs = chat["log"].read_text() + (chat["home"] / "ui.log").read_text()
    assert SECRET not in logs and TOKEN not in logs
    assert TOKEN not in json.dumps(audited(chat))


def test_the_shipped_manifest_sends_the_command_and_the_buttons_to_the_path_rmi_chat_serves():
    import yaml

    manifest = yaml.safe_load((Path(__file__).resolve().parent.parent / "deploy" / "slack-manifest.yaml").read_text())
    [command] = manifest["features"]["slash_commands"]
    assert command["command"] == "/rmi" and command["url"].endswith("/slack/events")
    assert manifest["settings"]["interactivity"]["is_enabled"]
    assert manifest["settings"]["interactivity"]["request_url"].endswith("/slack/events")
    assert not manifest["settings"]["socket_mode_enabled"]  # HTTP mode: Slack calls rmi chat
