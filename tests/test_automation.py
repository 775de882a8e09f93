"""The loop turns by itself: enough new feedback starts a cycle, failures and promotions reach a person once."""

import pytest
from dagster import (
    DagsterEventType,
    build_run_status_sensor_context,
    build_sensor_context,
    instance_for_test,
    materialize,
)
from dagster_dev import dagster_dev, wait_for
from feedback_intake import event
from webhook import serve_hook

from rmi_pipeline import layout
from rmi_pipeline.assets import FEEDBACK, eval_suite, training_dataset
from rmi_pipeline.automation.alerts import run_failure_alert
from rmi_pipeline.automation.sensors import enough_feedback_sensor
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources
from rmi_pipeline.resources.notifier import Notifier
from rmi_pipeline.world.curators import curate_eval_suite


@pytest.fixture
def receiver():
    """A webhook receiver on 127.0.0.1 that keeps every JSON body posted to it."""
    bodies: list = []
    server = serve_hook(bodies)
    yield f"http://127.0.0.1:{server.server_port}/hook", bodies
    server.shutdown()


def test_alerts_post_slack_json_once_with_a_link_to_the_run(receiver, tmp_path):
    url, bodies = receiver
    notifier = Notifier(webhook_url=url, ui_url="http://127.0.0.1:3000", state_path=str(tmp_path / "sent.json"))
    assert notifier.notify("promotion", "champion v1 -> v2", key="promotion-2", run_id="abcdef123456")
    assert not notifier.notify("promotion", "champion v1 -> v2", key="promotion-2", run_id="abcdef123456")
    link = "<http://127.0.0.1:3000/runs/abcdef123456|run abcdef12>"
    assert bodies == [{"text": f"[rmi promotion] champion v1 -> v2 {link}"}]
    quiet = Notifier(webhook_url=None, state_path=str(tmp_path / "quiet.json"))
    assert quiet.notify("failure", "logged only", key="x") and len(bodies) == 1


def test_a_failed_blocking_check_alerts_a_person_once(receiver, rmi_env):
    url, bodies = receiver
    resources = build_resources(rmi_env)
    notifier = Notifier(webhook_url=url, state_path=str(rmi_env.resolved_home / "sent.json"))
    resources["storage"].write_bytes(f"{layout.INCOMING}/bad.jsonl", b"garbage\n" * 5)
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("feedback_batch", ["bad.jsonl"])
        result = materialize(FEEDBACK, partition_key="bad.jsonl", instance=instance, resources=resources,
                             raise_on_error=False)
        assert not result.success
        run = instance.get_run_by_id(result.run_id)
        failure = instance.all_logs(result.run_id, of_type=DagsterEventType.RUN_FAILURE)[0].dagster_event
        for _ in range(2):  # a second evaluation of the same failure sends nothing
            context = build_run_status_sensor_context(sensor_name="run_failure_alert", dagster_event=failure,
                                                      dagster_instance=instance, dagster_run=run,
                                                      resources={"notifier": notifier}).for_run_failure()
            run_failure_alert(context)
    assert len(bodies) == 1
    text = bodies[0]["text"]
    assert text.startswith("[rmi failure]") and "blocking asset check failed" in text and result.run_id[:8] in text


def test_enough_new_feedback_starts_one_cycle_and_a_dataset_resets_the_count(rmi_env, monkeypatch):
    monkeypatch.setenv("RMI_CYCLE_MIN_NEW_EVENTS", "30")
    resources = build_resources(rmi_env)
    curate_eval_suite(resources["eval_store"], ArithmeticRecipe(), 20, seed=0)
    with instance_for_test() as instance:
        def land(name: str, first: int, n: int):
            resources["storage"].write_bytes(f"{layout.INCOMING}/{name}",
                                             "\n".join(event(i) for i in range(first, first + n)).encode())
            instance.add_dynamic_partitions("feedback_batch", [name])
            assert materialize(FEEDBACK, partition_key=name, instance=instance, resources=resources).success

        def tick():
            return enough_feedback_sensor(build_sensor_context(instance=instance))

        land("a.jsonl", 0, 20)
        assert "20 new feedback events" in tick().skip_message
        land("b.jsonl", 20, 20)
        request = tick()
        assert request.tags == {"rmi/trigger": "new_feedback", "rmi/new_events": "40"}
        assert tick().run_key == request.run_key  # the same state asks for the same run: Dagster dedupes it
        assert materialize([eval_suite, training_dataset], instance=instance, resources=resources).success
        assert "0 new feedback events" in tick().skip_message


def test_under_the_daemon_landed_feedback_becomes_a_promoted_champion_with_no_click(tmp_path):
    """Real `dagster dev` (webserver + daemon): a file lands, and the sensors ingest it and run a cycle."""
    from rmi_pipeline.cli import prepare_home
    from rmi_pipeline.settings import Settings

    home = tmp_path / "home"
    env = {"RMI_BOOTSTRAP_STEPS": "300", "RMI_GATE_FIRST_FLOOR": "0", "RMI_CYCLE_MIN_NEW_EVENTS": "50",
           "RMI_EVAL_ITEMS_PER_SLICE": "20", "RMI_REFRESHED_ITEMS_PER_SLICE": "20"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {"RMI_HOME": str(home), **env}.items():
            mp.setenv(key, value)
        settings = Settings()
        prepare_home(settings)
        resources = build_resources(settings)
        curate_eval_suite(resources["eval_store"], ArithmeticRecipe(), 20, seed=0)
        mp.delenv("DAGSTER_HOME")
    resources["storage"].write_bytes(f"{layout.INCOMING}/landed.jsonl",
                                     "\n".join(event(i) for i in range(80)).encode())
    log = tmp_path / "dagster.log"
    with dagster_dev(home, log, **env) as ui:
        def promotions():
            data = ui('{ assetOrError(assetKey: {path: ["champion"]}) { ... on Asset { assetMaterializations(limit: 5)'
                      ' { runId } } } }')
            return (data["assetOrError"] or {}).get("assetMaterializations")

        promoted = wait_for(promotions, 300, "promotion", log)
        runs = ui("{ runsOrError { ... on Runs { results { runId jobName status tags { key value } } } } }")
    runs = runs["runsOrError"]["results"]
    cycle = next(r for r in runs if r["runId"] == promoted[0]["runId"])
    assert cycle["jobName"] == "improvement_cycle" and cycle["status"] == "SUCCESS"
    assert {"key": "rmi/trigger", "value": "new_feedback"} in cycle["tags"]
    ingest = [r for r in runs if r["jobName"] == "ingest_feedback"]
    assert len(ingest) == 1 and ingest[0]["status"] == "SUCCESS"
    assert resources["registry"].version("champion") is not None
