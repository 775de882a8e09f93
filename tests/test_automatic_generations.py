"""The automation starts the champion's successors by itself: a new generation when its gains stall (within a budget
per champion), a derivative after each promotion; and `rmi status` shows them. A real Dagster instance and MLflow
registry; the runs the sensors ask for are recorded as the daemon would, never trained."""

import pytest
import torch
from dagster import AssetMaterialization, DagsterInstance, DagsterRunStatus, build_sensor_context

from rmi_pipeline.assets import candidate_evaluation
from rmi_pipeline.automation.sensors import derivative_sensor, generation_sensor
from rmi_pipeline.definitions import build_definitions
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.resources.registry import FAST
from rmi_pipeline.settings import Derivative, Generations


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """A home with the three model versions (v1 small, v2 small, v3 micro), none champion yet, made once (MLflow's
    first database takes seconds); each test works on a copy of it."""
    from conftest import FAST as FAST_SETTINGS  # not the registry's FAST alias imported above

    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.settings import Settings

    home = tmp_path_factory.mktemp("successors") / "home"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {**FAST_SETTINGS, "RMI_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}.items():
            mp.setenv(key, value)
        settings = Settings()
        prepare_home(settings)
        registry, recipe = build_resources(settings)["registry"], ArithmeticRecipe()
        torch.manual_seed(0)
        with registry.run("successors", tags={}) as run_id:
            for size in ("small", "small", "micro"):
                registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)), settings.recipe,
                                        tags={"generation": "1", "model_size": size})
    return home


@pytest.fixture
def home(registered, rmi_env):
    """An RMI_HOME with Dagster's instance in it and three model versions (v1 small, v2 small, v3 micro), none
    champion yet."""
    import shutil

    from rmi_pipeline.cli.home import prepare_home

    settings = rmi_env.model_copy(update={
        "generations": Generations(size="small", stall_cycles=3, stall_gain=0.01, budget=1),
        "derivative": Derivative(size="micro")})
    shutil.copytree(registered, settings.resolved_home)
    prepare_home(settings)
    resources = build_resources(settings)
    with DagsterInstance.get() as instance:
        yield settings, resources, instance, build_definitions(settings)


def tick(sensor, settings, resources, instance):
    return sensor(build_sensor_context(instance=instance, resources={
        "settings": settings, "registry": resources["registry"], "storage": resources["storage"]}))


def record(instance, defs, request, status=DagsterRunStatus.SUCCESS):
    """The run a sensor asked for, as the daemon would record it (with the sensor's name), in `status`."""
    job = defs.resolve_job_def("derivative" if "rmi/derivative_size" in request.tags else "improvement_cycle")
    return instance.create_run_for_job(job, run_config=request.run_config, status=status,
                                       tags={**request.tags, "dagster/sensor_name": "a_sensor"})


def evaluated(instance, *gains):
    """candidate_evaluation materializations, oldest first; None: a first model's, which has no gain."""
    for gain in gains:
        instance.report_runless_asset_event(AssetMaterialization(
            asset_key=candidate_evaluation.key, metadata={} if gain is None else {"gain": gain}))


def test_a_new_generation_starts_when_the_last_gains_stall_once_per_champion_and_never_beside_a_cycle(home):
    settings, resources, instance, defs = home
    registry = resources["registry"]
    generation = lambda s=settings: tick(generation_sensor, s, resources, instance)  # noqa: E731
    unset = settings.model_copy(update={"generations": Generations()})
    assert "RMI_GENERATION_SIZE is unset" in generation(unset).skip_message
    assert generation().skip_message == "no champion yet to teach a new generation"
    registry.promote("1", {"promoted_by": "test"})
    evaluated(instance, None)
    assert "1 of 3 evaluations so far" in generation().skip_message
    evaluated(instance, 0.05, 0.003)
    assert generation().skip_message.startswith("the gains have not stalled: the last 3 were +0.003, +0.050, first "
                                                "model")
    evaluated(instance, 0.001, -0.02)
    request = generation()
    assert request.run_key == "generation-v1-1"
    assert request.run_config["ops"]["candidate_model"]["config"] == {
        "size": "small", "taught": True, "focus": [], "focus_weight": 1.0, "steps_multiplier": 1.0}
    assert request.tags == {"rmi/trigger": "generation", "rmi/champion": "1", "rmi/generation_size": "small",
                            "rmi/gains": "-0.020, +0.001, +0.003"}
    running = instance.create_run_for_job(defs.resolve_job_def("improvement_cycle"), status=DagsterRunStatus.STARTED,
                                          tags={"rmi/trigger": "new_feedback"})
    assert generation().skip_message == "the gains stalled: a new generation waits for the running cycle"
    instance.delete_run(running.run_id)
    registry.start_canary("2", {})
    assert generation().skip_message == "the gains stalled: a new generation waits for canary v2's verdict"
    registry.end_canary({"canary_outcome": "aborted"})
    record(instance, defs, generation())  # trained, and the gate turned it down
    assert "champion v1 has used its budget: 1 of RMI_GENERATION_BUDGET=1" in generation().skip_message
    registry.promote("2", {"promoted_by": "test"})  # a new champion has a budget of its own
    assert generation().run_key == "generation-v2-1"
    evaluated(instance, 0.08)  # the promotion's gain: progress again
    assert "the gains have not stalled" in generation().skip_message


def test_each_new_champion_gets_one_derivative_and_a_run_already_asked_for_is_not_asked_again(home):
    settings, resources, instance, defs = home
    registry, storage = resources["registry"], resources["storage"]
    derivative = lambda s=settings: tick(derivative_sensor, s, resources, instance)  # noqa: E731
    unset = settings.model_copy(update={"derivative": Derivative()})
    assert "RMI_DERIVATIVE_SIZE is unset" in derivative(unset).skip_message
    assert derivative().skip_message == "no champion yet to distil a derivative from"
    registry.promote("1", {"promoted_by": "test"})
    request = derivative()
    assert request.run_key == "derivative-v1"
    assert request.run_config["ops"]["fast_candidate"]["config"] == {"size": "micro", "taught": True}
    assert request.tags == {"rmi/trigger": "derivative", "rmi/champion": "1", "rmi/derivative_size": "micro"}
    run = record(instance, defs, request, DagsterRunStatus.STARTED)
    assert derivative().skip_message == (f"champion v1's derivative was asked for already (run {run.run_id[:8]}, "
                                         "started); `rmi derivative` trains another")
    storage.write_json(layout.DERIVATIVE_LATEST, {"version": "3", "champion": "1"})
    assert derivative().skip_message == "champion v1 has its derivative: v3"
    registry.promote("2", {"promoted_by": "test"})
    assert derivative().skip_message == f"champion v2's derivative waits for derivative run {run.run_id[:8]}"
    instance.report_run_canceled(instance.get_run_by_id(run.run_id))
    assert derivative().run_key == "derivative-v2"


def test_status_shows_the_champion_s_generation_the_fast_model_and_the_latest_successor_runs(home):
    from rmi_pipeline.cli.report import status_text

    settings, resources, instance, defs = home
    registry = resources["registry"]
    registry.promote("1", {"promoted_by": "test"})
    before = status_text(settings)
    assert "generation 1  size small" in before and "  fast:" not in before
    assert "new generations and derivatives" not in before  # none yet: not a line
    registry.point(FAST, "3", {"derivative_of": "1", "speedup": "2.41"})
    evaluated(instance, 0.001, 0.002, 0.003)
    generation = record(instance, defs, tick(generation_sensor, settings, resources, instance),
                        DagsterRunStatus.STARTED)
    by_hand = instance.create_run_for_job(defs.resolve_job_def("derivative"), status=DagsterRunStatus.FAILURE,
                                          tags={"rmi/trigger": "derivative", "rmi/derivative_size": "micro"})
    text = status_text(settings)
    assert "  fast: v3  distilled from v1  2.41x as fast  size micro" in text
    assert "new generations and derivatives (latest 3):" in text
    lines = text.splitlines()
    first = lines.index("new generations and derivatives (latest 3):")
    assert lines[first + 1].startswith(f"  {by_hand.run_id[:8]} ")  # newest first
    assert lines[first + 1].endswith("derivative at size micro: failure, started by `rmi derivative`")
    assert lines[first + 2].endswith("new generation at size small: started, for champion v1, started by a_sensor")
    assert generation.run_id[:8] in lines[first + 2]
