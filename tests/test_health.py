"""champion_health flags a slice whose live thumbs-down rate rises, and regression_sensor acts within a budget."""

import pytest
import torch
from dagster import DagsterRun, DagsterRunStatus, build_sensor_context, instance_for_test, materialize
from feedback_intake import Intake, event
from webhook import serve_hook

from rmi_pipeline.assets import champion_health, eval_suite
from rmi_pipeline.automation.sensors import regression_sensor
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources
from rmi_pipeline.resources.notifier import Notifier
from rmi_pipeline.resources.registry import ModelRegistry
from rmi_pipeline.settings import DEFAULT_RECIPE as RECIPE_PATH
from rmi_pipeline.settings import Settings
from rmi_pipeline.world.curators import curate_eval_suite

R = ArithmeticRecipe()


def test_a_rising_thumbs_down_rate_regresses_and_starts_targeted_cycles_until_the_budget(rmi_env, monkeypatch):
    monkeypatch.setenv("RMI_REGRESSION_BUDGET", "2")
    monkeypatch.setenv("RMI_REGRESSION_BACKOFF_SECONDS", "0")
    resources = build_resources(Settings())
    registry = resources["registry"]
    curate_eval_suite(resources["eval_store"], ArithmeticRecipe(), 20, seed=0)
    torch.manual_seed(0)
    with registry.run("serving", tags={}) as run_id:
        version = registry.register_model(run_id, R.checkpoint(R.build_model(0.0, 1)), RECIPE_PATH, tags={}).version
    registry.promote(version, {"promoted_by": "test"})
    bodies: list = []
    server = serve_hook(bodies)
    notifier = Notifier(webhook_url=f"http://127.0.0.1:{server.server_port}/", state_path=str(rmi_env.resolved_home
                                                                                            / "sent.json"))
    with instance_for_test() as instance:
        intake = Intake(resources, instance)

        def land(name: str, rating: str, first: int):
            lines = [event(first + i, prompt=f"{100 + i}+{200 + i}=", model_version=str(version), rating=rating)
                     for i in range(40)]
            intake.land(name, "\n".join(lines).encode())
            intake.tick()
            assert intake.ingest(name)[0].success

        def health() -> dict:
            result = materialize([eval_suite, champion_health], instance=instance, resources=resources,
                                 selection=[champion_health])
            [check] = result.get_asset_check_evaluations()  # the UI's green or warning
            return {k: v.value for k, v in result.asset_materializations_for_node("champion_health")[0]
                    .metadata.items()} | {"check_passed": check.passed}

        def tick():
            return regression_sensor(build_sensor_context(
                instance=instance, resources={"notifier": notifier, "settings": resources["settings"]}))

        assert materialize([eval_suite], instance=instance, resources=resources).success
        land("calm.jsonl", "up", 0)
        first = health()
        assert first["regressed"] is False and first["thumbs_down add/3"] == 0.0 and first["check_passed"]
        assert first["eval_scores"].startswith("answered")  # the champion's first check on this suite
        assert "healthy" in tick().skip_message

        land("angry.jsonl", "down", 1000)
        with monkeypatch.context() as same_suite:  # its scores on this suite are known: no model is loaded
            same_suite.setattr(ModelRegistry, "load", lambda *_: pytest.fail("the champion was loaded again"))
            second = health()
        assert second["regressed"] is True and second["regressed_slices"] == ["add/3"] and not second["check_passed"]
        assert second["thumbs_down add/3"] == 0.5
        assert second["eval_scores"].startswith("reused")
        assert {k: v for k, v in second.items() if k.startswith("eval ")} == {
            k: v for k, v in first.items() if k.startswith("eval ")}

        request = tick()
        assert request.run_config["ops"] == {"candidate_model": {"config": {
            "focus": ["add/3"], "focus_weight": 4.0, "steps_multiplier": 2.0, "size": "", "taught": True}}}
        assert request.tags["rmi/trigger"] == "regression" and request.tags["rmi/attempt"] == "1"
        for attempt in range(2):  # two targeted cycles ran (and their challengers failed the gate)
            instance.add_run(DagsterRun(job_name="improvement_cycle", status=DagsterRunStatus.SUCCESS,
                                        tags={**{k: request.tags[k] for k in ("rmi/trigger", "rmi/champion")},
                                              "rmi/attempt": str(attempt + 1)}))
        for _ in range(3):
            assert "budget spent" in tick().skip_message
        assert materialize([eval_suite], instance=instance, resources=resources).success  # a new suite is drawn
        assert health()["eval_scores"].startswith("answered")
    server.shutdown()
    assert len(bodies) == 1 and bodies[0]["text"].startswith("[rmi budget] champion v1 regressed on add/3")
