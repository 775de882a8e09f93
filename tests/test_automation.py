"""The loop turns by itself: enough new feedback starts a cycle, failures and promotions reach a person once."""

import json

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

from rmi_pipeline.assets import FEEDBACK, eval_suite, training_dataset
from rmi_pipeline.automation.alerts import run_failure_alert
from rmi_pipeline.automation.sensors import enough_feedback_sensor
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.resources.notifier import Notifier
from rmi_pipeline.settings import Automation
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
    [body] = bodies
    assert body["text"] == f"[rmi promotion] champion v1 -> v2 {link}"
    assert body["blocks"][0]["text"]["text"] == body["text"]  # Block Kit, with a button to the run
    assert body["blocks"][1]["elements"] == [{"type": "button", "text": {"type": "plain_text", "text": "Open the run"},
                                              "url": "http://127.0.0.1:3000/runs/abcdef123456",
                                              "action_id": "rmi_open_run"}]
    quiet = Notifier(webhook_url=None, state_path=str(tmp_path / "quiet.json"))
    assert quiet.notify("failure", "logged only", key="x") and len(bodies) == 1


def test_a_failed_blocking_check_alerts_a_person_once(receiver, rmi_env):
    url, bodies = receiver
    resources = build_resources(rmi_env)
    notifier = Notifier(webhook_url=url, state_path=str(rmi_env.resolved_home / "sent.json"))
    resources["storage"].write_bytes(layout.incoming("bad.jsonl"), b"garbage\n" * 5)
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


def test_enough_new_feedback_starts_one_cycle_and_a_dataset_resets_the_count(rmi_env):
    resources = build_resources(rmi_env.model_copy(update={"automation": Automation(cycle_min_new_events=30)}))
    curate_eval_suite(resources["eval_store"], ArithmeticRecipe(), 20, seed=0)
    with instance_for_test() as instance:
        def land(name: str, first: int, n: int):
            resources["storage"].write_bytes(layout.incoming(name),
                                             "\n".join(event(i) for i in range(first, first + n)).encode())
            instance.add_dynamic_partitions("feedback_batch", [name])
            assert materialize(FEEDBACK, partition_key=name, instance=instance, resources=resources).success

        def tick():
            return enough_feedback_sensor(build_sensor_context(instance=instance, resources={
                "settings": resources["settings"], "registry": resources["registry"]}))

        land("a.jsonl", 0, 20)
        assert "20 new feedback events" in tick().skip_message
        land("b.jsonl", 20, 20)
        request = tick()
        assert request.tags == {"rmi/trigger": "new_feedback", "rmi/new_events": "40"}
        assert tick().run_key == request.run_key  # the same state asks for the same run: Dagster dedupes it
        recipe = ArithmeticRecipe()
        registry = resources["registry"]
        with registry.run("trial", tags={}) as run_id:
            versions = [registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)),
                                                rmi_env.recipe, tags={}).version for _ in range(2)]
        registry.promote(versions[0], {"promoted_by": "test"})
        registry.start_canary(versions[1], {})
        assert f"40 new feedback events wait for canary v{versions[1]}'s verdict" in tick().skip_message
        registry.end_canary({"canary_outcome": "aborted"})
        assert tick().run_key == request.run_key
        assert materialize([eval_suite, training_dataset], instance=instance, resources=resources).success
        assert "0 new feedback events" in tick().skip_message


def test_a_queue_of_ingests_gets_one_health_check_and_one_canary_verdict_after_its_last(rmi_env):
    import time

    import torch
    from dagster import DagsterRunStatus

    from rmi_pipeline.automation.jobs import canary_trial, ingest_feedback
    from rmi_pipeline.automation.schedules import health_after_ingest
    from rmi_pipeline.automation.sensors import canary_sensor
    from rmi_pipeline.definitions import build_definitions

    recipe = ArithmeticRecipe()
    resources = build_resources(rmi_env)
    registry = resources["registry"]
    torch.manual_seed(0)
    with registry.run("queue", tags={}) as run_id:
        versions = [registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)), rmi_env.recipe,
                                            tags={}).version for _ in range(2)]
    registry.promote(versions[0], {"promoted_by": "test"})
    registry.start_canary(versions[1], {"canary_started_at": str(time.time())})
    defs = build_definitions(rmi_env)
    with instance_for_test() as instance:
        name = "a.jsonl"
        resources["storage"].write_bytes(layout.incoming(name), "\n".join(event(i) for i in range(5)).encode())
        instance.add_dynamic_partitions("feedback_batch", [name, "b.jsonl"])
        ingested = materialize(FEEDBACK, partition_key=name, instance=instance, resources=resources)
        success = instance.all_logs(ingested.run_id, of_type=DagsterEventType.RUN_SUCCESS)[0].dagster_event

        def after_ingest():
            return health_after_ingest(build_run_status_sensor_context(
                sensor_name="health_after_ingest", dagster_event=success, dagster_instance=instance,
                dagster_run=instance.get_run_by_id(ingested.run_id), resources={"registry": registry}))

        def verdict():
            return canary_sensor(build_sensor_context(instance=instance, resources={
                "settings": rmi_env, "registry": registry}))

        assert after_ingest().run_key and verdict().run_key  # nothing queued: a check and a verdict now
        waiting = DagsterRunStatus.NOT_STARTED
        queued = instance.create_run_for_job(defs.resolve_job_def(ingest_feedback.name), status=waiting,
                                             tags={"dagster/partition": "b.jsonl"})
        assert "ingest_feedback run waits to start" in after_ingest().skip_message
        assert "ingest_feedback run waits to start" in verdict().skip_message
        instance.delete_run(queued.run_id)
        trial = instance.create_run_for_job(defs.resolve_job_def(canary_trial.name), status=waiting)
        assert "canary_trial run waits to start" in verdict().skip_message  # it will read the latest batches
        instance.delete_run(trial.run_id)
        assert verdict().run_key.startswith(f"canary-v{versions[1]}-after-")


def test_health_checks_wait_for_a_first_champion_and_a_cycle_gets_one_unless_one_waits_or_started_since(rmi_env):
    """No check after an ingest while there is no champion to check: the first one gets its baseline after the cycle
    that promoted it (health_after_cycle). That check is skipped when another waits to start, or started after the
    cycle ended (one an ingest asked for, queued behind the cycle): it checks the champion the cycle left."""
    from dagster import DagsterEvent, DagsterRunStatus

    from rmi_pipeline.automation.jobs import health_check, improvement_cycle, ingest_feedback
    from rmi_pipeline.automation.schedules import health_after_cycle, health_after_ingest
    from rmi_pipeline.definitions import build_definitions

    defs = build_definitions(rmi_env)
    with instance_for_test() as instance:
        def run(job, *times):  # started and ended at `times`, as far as given
            made = instance.create_run_for_job(defs.resolve_job_def(job.name), status=DagsterRunStatus.NOT_STARTED)
            for kind, at in zip((DagsterEventType.RUN_START, DagsterEventType.RUN_SUCCESS), times, strict=False):
                instance.report_dagster_event(DagsterEvent(kind.value, job_name=job.name), made.run_id, timestamp=at)
            return made

        def after(sensor, finished, **resources):
            success = instance.all_logs(finished.run_id, of_type=DagsterEventType.RUN_SUCCESS)[0].dagster_event
            return sensor(build_run_status_sensor_context(
                sensor_name=sensor.name, dagster_event=success, dagster_instance=instance,
                dagster_run=instance.get_run_by_id(finished.run_id), resources=resources))

        ingest = run(ingest_feedback, 100.0, 200.0)
        assert "no champion yet" in after(health_after_ingest, ingest, registry=defs.resources["registry"]).skip_message
        cycle = run(improvement_cycle, 1000.0, 2000.0)
        assert after(health_after_cycle, cycle).run_key == f"health-after-{cycle.run_id}"
        run(health_check, 500.0, 600.0)  # it checked before the cycle: one now all the same
        assert after(health_after_cycle, cycle).run_key == f"health-after-{cycle.run_id}"
        waiting = run(health_check)
        assert "health_check run waits to start" in after(health_after_cycle, cycle).skip_message
        instance.delete_run(waiting.run_id)
        since = run(health_check, 2100.0)
        assert f"health_check run {since.run_id[:8]} started after this cycle ended" in after(
            health_after_cycle, cycle).skip_message


def test_under_the_daemon_feedback_becomes_a_champion_and_a_drift_starts_a_targeted_cycle_with_no_click(tmp_path):
    """Real `rmi ui` (webserver + daemon): a file lands, and the sensors ingest it and run a cycle that promotes
    a first champion. Then users drift to a slice it never served; health flags it and a targeted cycle starts."""
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.settings import Settings

    home = tmp_path / "home"
    env = {"RMI_TRAIN_BOOTSTRAP_STEPS": "50", "RMI_TRAIN_STEPS": "50", "RMI_GATE_FIRST_FLOOR": "0",
           "RMI_CYCLE_MIN_NEW_EVENTS": "50", "RMI_EVAL_ITEMS_PER_SLICE": "20",
           "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE": "20",
           "RMI_SENSOR_INTERVAL_SECONDS": "5"}  # health and regression sensors every 5 s too, not 30
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {"RMI_HOME": str(home), **env}.items():
            mp.setenv(key, value)
        settings = Settings()
        prepare_home(settings)
        resources = build_resources(settings)
        curate_eval_suite(resources["eval_store"], ArithmeticRecipe(), 20, seed=0)
        mp.delenv("DAGSTER_HOME")
    # the events name model version 1: once v1 is champion they are its live feedback (thumbs up on add/1, add/2)
    resources["storage"].write_bytes(layout.incoming("landed.jsonl"),
                                     "\n".join(event(i) for i in range(80)).encode())
    log = tmp_path / "dagster.log"
    runs_query = ("{ runsOrError%s { ... on Runs { results { runId jobName status tags { key value } } } } }")
    with dagster_dev(home, log, **env) as ui:
        def materializations(asset: str) -> list:
            data = ui(f'{{ assetOrError(assetKey: {{path: ["{asset}"]}}) {{ ... on Asset {{ assetMaterializations('
                      'limit: 5) { runId metadataEntries { label ... on BoolMetadataEntry { boolValue } '
                      '... on TextMetadataEntry { text } ... on JsonMetadataEntry { jsonString } } } } } }')
            value = lambda e: json.loads(e["jsonString"]) if "jsonString" in e else e.get("boolValue", e.get("text"))  # noqa: E731
            return [{"runId": m["runId"], **{e["label"]: value(e) for e in m["metadataEntries"]}}
                    for m in (data["assetOrError"] or {}).get("assetMaterializations") or []]

        def health_of_v1() -> dict | None:
            return next((m for m in materializations("champion_health") if m.get("champion_version") == "1"), None)

        promoted = wait_for(lambda: materializations("champion"), 300, "promotion", log)
        baseline = wait_for(health_of_v1, 120, "health check after the promotion", log)  # health_after_cycle
        assert baseline["regressed"] is False
        # users move to 5-digit subtraction, which v1 never served, and it answers them wrong
        resources["storage"].write_bytes(layout.incoming("drifted.jsonl"), "\n".join(
            event(1000 + i, prompt=f"{50000 + i}-{10000 + i}=", completion="7", rating="down", correction="40000",
                  skill="sub") for i in range(35)).encode())
        targeted = wait_for(lambda: ui(runs_query % '(filter: {tags: [{key: "rmi/trigger", value: "regression"}]})')
                            ["runsOrError"]["results"], 180, "regression-triggered cycle", log)
        flagged = health_of_v1()
        runs = ui(runs_query % "")["runsOrError"]["results"]
    cycle = next(r for r in runs if r["runId"] == promoted[0]["runId"])
    assert cycle["jobName"] == "improvement_cycle" and cycle["status"] == "SUCCESS"
    assert {"key": "rmi/trigger", "value": "new_feedback"} in cycle["tags"]
    ingest = [r for r in runs if r["jobName"] == "ingest_feedback"]
    assert len(ingest) == 2 and {r["status"] for r in ingest} == {"SUCCESS"}  # landed.jsonl, drifted.jsonl
    assert str(resources["registry"].version("champion").version) == "1"
    assert flagged["regressed"] is True and flagged["regressed_slices"] == ["sub/5"]
    assert flagged["new_slices"] == "sub/5"
    assert len(targeted) == 1 and targeted[0]["jobName"] == "improvement_cycle"
    tags = {t["key"]: t["value"] for t in targeted[0]["tags"]}
    assert {k: tags.get(k) for k in ("rmi/trigger", "rmi/champion", "rmi/focus", "rmi/attempt")} == {
        "rmi/trigger": "regression", "rmi/champion": "1", "rmi/focus": "sub/5", "rmi/attempt": "1"}
