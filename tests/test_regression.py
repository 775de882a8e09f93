"""Users drift to a slice the champion barely knows: health regresses. When no challenger can do better, the loop
stops after its retry budget and alerts a person once, through real runs of the jobs in one Dagster instance."""

import torch
from dagster import AssetMaterialization, SkipReason, build_sensor_context, instance_for_test, materialize
from feedback_intake import event
from webhook import serve_hook

from rmi_pipeline.assets import eval_suite
from rmi_pipeline.automation.in_process import QUIET_LOGS, ingest_new_batches
from rmi_pipeline.definitions import build_definitions
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import layout
from rmi_pipeline.settings import DEFAULT_RECIPE as RECIPE_PATH
from rmi_pipeline.settings import Settings
from rmi_pipeline.world.curators import curate_eval_suite

R = ArithmeticRecipe()


def test_with_no_improvement_possible_the_loop_stops_after_its_budget_and_alerts_once(rmi_env, monkeypatch):
    bodies: list = []
    server = serve_hook(bodies)
    for key, value in {"RMI_TRAIN_LEARNING_RATE": "0",  # every challenger is its champion again: nothing can improve
                       "RMI_TRAIN_STEPS": "2", "RMI_REGRESSION_BUDGET": "2", "RMI_REGRESSION_BACKOFF_SECONDS": "0",
                       "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE": "10", "RMI_GATE_RESAMPLES": "500",
                       "RMI_ALERT_WEBHOOK_URL": f"http://127.0.0.1:{server.server_port}/hook"}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    defs = build_definitions(settings)
    resources = defs.resources
    registry, storage = resources["registry"], resources["storage"]
    curate_eval_suite(resources["eval_store"], ArithmeticRecipe(), 10, seed=0)  # small: decoding is the cost here
    torch.manual_seed(0)
    with registry.run("serving", tags={}) as run_id:
        first = registry.register_model(run_id, R.checkpoint(R.build_model(0.0, 1)), RECIPE_PATH, tags={}).version
    registry.promote(first, {"promoted_by": "test"})

    with instance_for_test() as instance:
        def job(name: str, **kwargs):
            return defs.resolve_job_def(name).execute_in_process(instance=instance, run_config=kwargs.pop(
                "run_config", QUIET_LOGS), raise_on_error=False, **kwargs)

        def land(name: str, lines: list[str]) -> dict:
            storage.write_bytes(layout.incoming(name), "\n".join(lines).encode())
            assert ingest_new_batches(defs, instance)["ingested"] == len(lines)
            result = job("health_check")  # as health_after_ingest does under the daemon
            return {k: v.value for k, v in result.asset_materializations_for_node("champion_health")[0]
                    .metadata.items()}

        def tick():
            return defs.resolve_sensor_def("regression_sensor")(
                build_sensor_context(instance=instance, resources={k: resources[k] for k in ("notifier", "settings")}))

        assert materialize([eval_suite], instance=instance, resources=resources).success  # as a first cycle would
        calm = land("calm.jsonl", [event(i, prompt=f"{100 + i}+{200 + i}=", completion=str(300 + 2 * i),
                                         model_version=str(first)) for i in range(40)])
        assert calm["regressed"] is False and calm["baseline_thumbs_down"] == 0.0
        # users move to 5-digit subtraction, which they never asked before, and the champion gets it wrong
        drifted = land("drifted.jsonl", [event(1000 + i, prompt=f"{50000 + i}-{10000 + i}=", completion="7",
                                               rating="down", correction="40000", skill="sub",
                                               model_version=str(first)) for i in range(40)])
        assert drifted["regressed"] is True and drifted["regressed_slices"] == ["sub/5"]
        assert drifted["new_slices"] == "sub/5" and drifted["thumbs_down sub/5"] == 1.0

        attempts = []
        for _ in range(4):
            request = tick()
            if isinstance(request, SkipReason):
                break
            assert tick().run_key == request.run_key  # the daemon would launch it once, however often asked
            result = job("improvement_cycle", run_config={**QUIET_LOGS, **request.run_config}, tags=request.tags)
            verdict = result.asset_materializations_for_node("candidate_evaluation")[0].metadata["verdict"].value
            attempts.append((dict(request.tags), result.success, verdict))
            job("health_check")  # as health_after_cycle does
        assert [(t["rmi/trigger"], t["rmi/focus"], t["rmi/attempt"]) for t, _, _ in attempts] == [
            ("regression", "sub/5", "1"), ("regression", "sub/5", "2")]
        assert all(ok and verdict == "reject" for _, ok, verdict in attempts)
        assert registry.version("champion").version == first
        client = registry.client()  # the second turn did not remake the first's candidate: it trained anew
        seeds = [client.get_run(client.get_model_version(settings.model_name, v).run_id).data.params["seed"]
                 for v in (first + 1, first + 2)]
        assert seeds == [str(settings.seed + first), str(settings.seed + first + 1000)]
        for _ in range(3):
            assert "budget spent" in tick().skip_message
        assert len(bodies) == 1 and bodies[0]["text"].startswith("[rmi budget] champion v1 regressed on sub/5")

        # a person promotes another version: the old verdict is stale until the new champion's own check
        registry.promote(registry.version("challenger").version, {"promoted_by": "test"})
        instance.report_runless_asset_event(AssetMaterialization("champion", metadata={"promoted_by": "test"}))
        assert "waiting for its own" in tick().skip_message
        job("health_check")
        assert "healthy" in tick().skip_message
    server.shutdown()
