"""RMI_PROMOTION=approval: a challenger that passes waits for a person, who approves it (`rmi promote`, Approve) or
rejects it (`rmi reject`, Reject, `/rmi reject`), audited; one left waiting past RMI_APPROVAL_HOURS is dropped.

Small untrained models registered in a real MLflow registry (v1 champion, v2 the challenger), the real `champion`
asset and sensor on a real Dagster instance, alerts at a webhook on 127.0.0.1, and the Slack app in a thread
answering signed requests."""

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
import torch
from conftest import FAST
from dagster import DagsterInstance, build_sensor_context, materialize
from slack import click, slash
from webhook import serve_hook

from rmi_pipeline.assets import champion
from rmi_pipeline.assets.approval import APPROVAL, REQUESTED_AT
from rmi_pipeline.cli.main import main
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.resources.registry import CANARY, CHALLENGER, CHAMPION
from rmi_pipeline.settings import Settings

SECRET = "approval-test-signing-secret"
ALLOWED, STRANGER = "U0ALLOWED", "U0STRANGER"


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """A home with three small models, made once (MLflow's first database takes seconds): v1 the champion, v2 the
    challenger, v3 neither. Each test works on a copy of it."""
    from rmi_pipeline.cli.home import prepare_home

    home = tmp_path_factory.mktemp("approval") / "home"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**FAST, "RMI_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}.items():
            mp.setenv(key, value)
        settings = Settings()
        prepare_home(settings)
        registry, recipe = build_resources(settings)["registry"], ArithmeticRecipe()
        torch.manual_seed(0)
        with registry.run("approval", tags={}) as run_id:
            for alias in (CHAMPION, CHALLENGER, None):
                registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)), settings.recipe,
                                        tags={}, alias=alias)
        registry.promote("1", {"promoted_by": "test"})
    return home


@pytest.fixture
def home(registered, tmp_path, monkeypatch):
    """RMI_PROMOTION=approval over a copy of the registered home; alerts go to a webhook whose bodies the test
    reads."""
    import shutil

    from rmi_pipeline.cli.home import prepare_home

    shutil.copytree(registered, tmp_path / "home")
    alerts: list[dict] = []
    hook = serve_hook(alerts)
    for key, value in {**FAST, "RMI_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "home" / "dagster"),
                       "RMI_PROMOTION": "approval", "RMI_ALERT_WEBHOOK_URL": f"http://127.0.0.1:{hook.server_port}/a",
                       "RMI_SLACK_SIGNING_SECRET": SECRET, "RMI_SLACK_ALLOWED_USERS": ALLOWED}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    prepare_home(settings)
    resources = build_resources(settings)
    yield {"settings": settings, "resources": resources, "registry": resources["registry"], "alerts": alerts}
    hook.shutdown()


def held(home, alias: str = CHAMPION) -> str | None:
    mv = home["registry"].version(alias)
    return str(mv.version) if mv else None


def tags(home, version: str) -> dict:
    return home["registry"].tags_of(version)


def gate_passes(home, version: str = "2") -> None:
    """The gate says promote challenger `version`; `champion` materializes on it."""
    home["resources"]["storage"].write_json(layout.evaluation(version), {
        "champion_version": "1", "scores": {"challenger_anchor_mean": 0.9},
        "decision": {"promote": True, "reason": "Promoted: better on every slice."}})
    result = materialize([champion], instance=DagsterInstance.get(), resources=home["resources"])
    assert result.success and not result.asset_materializations_for_node("champion")  # the champion did not change


def test_a_challenger_that_passes_the_gate_waits_for_a_person_and_the_champion_stays(home, capsys):
    gate_passes(home)
    assert held(home) == "1" and held(home, CHALLENGER) == "2"
    asked = tags(home, "2")
    since = datetime.fromisoformat(asked[REQUESTED_AT])
    assert asked[APPROVAL] == "waiting" and abs((datetime.now(UTC) - since).total_seconds()) < 60
    [alert] = home["alerts"]
    assert alert["text"].startswith("[rmi approval] v2 waits for a person's approval to become champion (now v1) "
                                    f"until {since + timedelta(hours=72):%Y-%m-%d %H:%M} UTC")
    assert [b["text"]["text"] for b in alert["blocks"][-1]["elements"]] == ["Open the run", "Approve", "Reject"]
    gate_passes(home)  # the gate again: it is asked about once
    assert tags(home, "2")[REQUESTED_AT] == asked[REQUESTED_AT] and len(home["alerts"]) == 1
    assert main(["status"]) == 0
    assert (f"approval: v2 waits for a person's approval since {since:%Y-%m-%d %H:%M} UTC, until "
            f"{since + timedelta(hours=72):%Y-%m-%d %H:%M} UTC") in capsys.readouterr().out


def test_approving_from_the_cli_moves_the_champion_and_its_tags_say_who_why_and_how(home, capsys):
    import getpass

    gate_passes(home)
    assert main(["promote", "2", "--reason", "reviewed the slices with compliance"]) == 0
    assert held(home) == "2" and home["registry"].champion_history()[-2:] == ["1", "2"]
    audit = tags(home, "2")
    assert audit[APPROVAL] == "approved" and audit["override_by"] == getpass.getuser()
    assert audit["override_reason"] == "reviewed the slices with compliance" and audit["override_via"] == "rmi CLI"
    [moved] = DagsterInstance.get().fetch_materializations(champion.key, limit=1).records
    assert moved.asset_materialization.metadata["champion_version"].value == "2"
    assert main(["reject", "2", "--reason", "too late"]) == 2  # decided: it waits no more
    assert "rmi reject: v2 does not wait for approval (approval: approved)" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "refusal"), [
    (["reject", "3", "--reason", "never asked"], "v3 does not wait for approval"),
    (["reject", "99", "--reason", "no such model"], "has no version 99"),
    (["reject", "2", "--reason", " "], "reject needs a reason"),
])
def test_a_rejection_of_a_version_that_does_not_wait_or_without_a_reason_is_refused_and_nothing_moves(
        home, capsys, args, refusal):
    gate_passes(home)
    assert main(args) == 2 and refusal in capsys.readouterr().err
    assert held(home) == "1" and held(home, CHALLENGER) == "2" and tags(home, "2")[APPROVAL] == "waiting"


@pytest.fixture
def slack_app(home):
    """`rmi chat`'s app under uvicorn in a thread, and a receiver for the replies Slack's response_url would take."""
    from gateway import app_in_thread

    from rmi_pipeline.chat.app import build_asgi

    replies: list[dict] = []
    receiver = serve_hook(replies)
    with app_in_thread(build_asgi(home["settings"])) as url:
        yield {"url": url, "replies": replies, "hook": f"http://127.0.0.1:{receiver.server_port}/response"}
    receiver.shutdown()


def reply(slack_app, count: int) -> dict:
    deadline = time.monotonic() + 30
    while len(slack_app["replies"]) < count:
        assert time.monotonic() < deadline, "no reply on response_url"
        time.sleep(0.05)
    return slack_app["replies"][count - 1]


def test_reject_from_the_alert_s_button_drops_the_challenger_leaves_the_champion_and_says_who(home, slack_app):
    from rmi_pipeline.chat.audit import read

    gate_passes(home)
    assert slash(slack_app["url"], SECRET, "status", STRANGER, slack_app["hook"]).status_code == 200
    assert "*Approval* v2 waits for a person's approval since" in json.dumps(reply(slack_app, 1)["blocks"])
    [alert] = home["alerts"]
    message = {"type": "message", "text": alert["text"], "blocks": alert["blocks"]}
    [button] = [b for b in alert["blocks"][-1]["elements"] if b["action_id"] == "rmi_reject"]
    value = json.loads(button["value"])
    click(slack_app["url"], SECRET, STRANGER, "rmi_reject", value, message, slack_app["hook"])
    assert "may not act on alerts" in reply(slack_app, 2)["text"]
    assert tags(home, "2")[APPROVAL] == "waiting" and held(home, CHALLENGER) == "2"  # a stranger moves nothing
    click(slack_app["url"], SECRET, ALLOWED, "rmi_reject", value, message, slack_app["hook"])
    done = reply(slack_app, 3)
    who = f"slack:{ALLOWED} (name-{ALLOWED})"
    assert f"v2 rejected by {who}; champion stays v1; no longer challenger" in done["text"]
    assert done["replace_original"] is True and not [b for b in done["blocks"] if b["type"] == "actions"]
    assert held(home) == "1" and held(home, CHALLENGER) is None and held(home, CANARY) is None
    audit = tags(home, "2")
    assert audit[APPROVAL] == "rejected" and audit["override_by"] == who and audit["override_via"] == "Slack"
    assert audit["override_reason"] == "Rejected, from approval-2"
    [seen] = DagsterInstance.get().fetch_observations(champion.key, limit=1).records
    assert seen.asset_observation.description == f"v2 rejected by {who} (Slack): Rejected, from approval-2"
    assert [(a["user"], a["outcome"]) for a in read(home["settings"]) if a["source"] == "button"] == [
        (STRANGER, "refused"), (ALLOWED, "done")]


def test_approve_from_the_alert_s_button_promotes_the_waiting_version_and_says_who(home, slack_app):
    gate_passes(home)
    [alert] = home["alerts"]
    message = {"type": "message", "text": alert["text"], "blocks": alert["blocks"]}
    [button] = [b for b in alert["blocks"][-1]["elements"] if b["action_id"] == "rmi_approve"]
    assert button["confirm"]["text"]["text"] == "This moves the champion (audited)."
    click(slack_app["url"], SECRET, ALLOWED, "rmi_approve", json.loads(button["value"]), message, slack_app["hook"])
    who = f"slack:{ALLOWED} (name-{ALLOWED})"
    assert f"Champion v1 -> v2, approved by {who}" in reply(slack_app, 1)["text"]
    audit = tags(home, "2")
    assert held(home) == "2" and audit[APPROVAL] == "approved" and audit["override_action"] == "approve"
    assert audit["override_by"] == who and audit["override_reason"] == "Approved, from approval-2"


def test_a_version_left_waiting_past_the_deadline_is_dropped_with_an_alert(home):
    from rmi_pipeline.automation.sensors import approval_deadline_sensor

    gate_passes(home)
    resources = home["resources"]

    def tick():
        return approval_deadline_sensor(build_sensor_context(instance=DagsterInstance.get(), resources={
            k: resources[k] for k in ("settings", "registry", "notifier")}))

    assert "v2 waits for approval until" in tick().skip_message and tags(home, "2")[APPROVAL] == "waiting"
    home["registry"].tag("2", {REQUESTED_AT: (datetime.now(UTC) - timedelta(hours=73)).isoformat()})
    assert "past its deadline (72 h, RMI_APPROVAL_HOURS) and was dropped" in tick().skip_message
    assert tags(home, "2")[APPROVAL] == "expired"
    assert held(home) == "1" and held(home, CHALLENGER) is None
    dropped = home["alerts"][-1]["text"]
    assert dropped.startswith("[rmi approval] v2 waited for a person's approval from ")
    assert "(no longer challenger); champion stays v1" in dropped
    assert tick().skip_message == "no version waits for approval" and len(home["alerts"]) == 2


def test_a_canary_its_users_would_promote_keeps_serving_while_it_waits_and_its_approval_ends_the_trial(
        home, monkeypatch):
    from rmi_pipeline.assets import canary_verdict
    from rmi_pipeline.assets.promotion import STARTED_AT

    registry = home["registry"]
    registry.start_canary("2", {STARTED_AT: str(time.time() - 3600)})
    monkeypatch.setenv("RMI_CANARY_MAX_HOURS", "0.5")  # its trial is over: the verdict is taken on what there is
    resources = build_resources(Settings())
    result = materialize([canary_verdict], instance=DagsterInstance.get(), resources=resources)
    meta = result.asset_materializations_for_node("canary_verdict")[0].metadata
    assert meta["verdict"].value == "promote" and meta["approval"].value == "waiting"
    assert held(home) == "1" and held(home, CANARY) == "2"  # still answering its share of users
    assert home["alerts"][-1]["text"].startswith("[rmi approval] v2 waits for a person's approval")
    assert main(["promote", "2", "--reason", "users and the gate agree"]) == 0
    assert held(home) == "2" and held(home, CANARY) is None
    assert tags(home, "2")[APPROVAL] == "approved" and tags(home, "2")["canary_outcome"].startswith("promoted by ")
