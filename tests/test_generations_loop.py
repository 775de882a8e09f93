"""The champion teaches its successors through the loop's own jobs, on a copy of the loop run's home: `rmi generation`
trains a larger model from scratch, taught, and gates it like any challenger with its lineage in MLflow; `rmi
derivative` distils a micro model that takes the alias `fast` when it keeps up, `rmi serve` answers with it under
RMI_SERVE_MODEL=fast, and the next derivative is trialled on that gateway's users as a canary before `fast` moves."""

import shutil

import httpx
import pytest
from conftest import FAST
from gateway import gateway_in_thread, warehouse_events

from rmi_pipeline.cli.main import main
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.resources.registry import CANARY, CANARY_FOR, CHAMPION
from rmi_pipeline.resources.registry import FAST as FAST_ALIAS
from rmi_pipeline.settings import Settings

# short lessons: what is under test is the jobs' lineage, gates and aliases, not what the students learn (a few teacher
# labels a slice prove they are used)
LESSONS = {"RMI_GENERATION_STEPS": "60", "RMI_DERIVATIVE_STEPS": "60", "RMI_TEACH_LABELS_PER_SLICE": "20",
           "RMI_PROBE_ITEMS": "50"}


@pytest.fixture(scope="module")
def taught_home(loop_home, tmp_path_factory):
    """A copy of the loop run's home (registry, stores, warehouse), its own Dagster instance, fast lessons."""
    home = tmp_path_factory.mktemp("taught") / "home"
    shutil.copytree(loop_home["home"], home, ignore=shutil.ignore_patterns("dagster", "serve", "training_worker"))
    env = {**FAST, **LESSONS, "RMI_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"),
           "RMI_SERVE_RELOAD_SECONDS": "0.3"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield {"home": home, "registry": build_resources(Settings())["registry"], "mp": mp}


def test_a_new_generation_is_trained_from_scratch_taught_and_gated_like_any_challenger(taught_home, capsys):
    registry = taught_home["registry"]
    champion = registry.version(CHAMPION)
    code = main(["generation", "--size", "small"])
    said = capsys.readouterr().out
    assert code in (0, 1) and "generation at size small: challenger v" in said, said
    new = registry.version("challenger")
    tags = new.tags
    assert (tags["generation"], tags["teacher"], tags["model_size"], tags["warm_start_from"]) == (
        str(int(champion.tags.get("generation", 1)) + 1), str(champion.version), "small", "scratch")
    run = registry.client().get_run(new.run_id)
    assert run.data.params["distillation"].startswith("labels and next-token distributions")
    assert int(run.data.params["teacher_labels"]) > 0
    assert int(run.data.params["parameters"]) > 3 * int(registry.client().get_run(champion.run_id)
                                                         .data.params["parameters"])
    report = build_resources(Settings())["storage"].read_json(layout.evaluation(new.version))
    assert report["champion_version"] == champion.version  # judged against the champion like any challenger
    after = registry.version(CHAMPION).version
    assert after == (new.version if report["decision"]["promote"] else champion.version)


def test_a_derivative_that_loses_quality_is_not_kept_and_one_that_keeps_up_is_served_as_fast_then_trialled(
        taught_home, capsys):
    """A derivative of 60 steps loses most of the champion's score: nothing moves. Copies of the champion's weights
    stand in for derivatives that keep up (the bench measures real ones, bench/generations.py): the first is kept as
    `fast` with no gateway serving it; then, with `rmi serve` answering from `fast`, the next is trialled on that
    gateway's users as its canary, and `fast` moves when they do not find it worse."""
    from dagster import DagsterInstance, materialize

    from rmi_pipeline.assets import canary_verdict
    from rmi_pipeline.assets.derivative import fast_model

    registry, mp = taught_home["registry"], taught_home["mp"]
    champion = str(registry.version(CHAMPION).version)
    assert main(["derivative", "--size", "micro"]) == 0
    said = capsys.readouterr().out
    latest = build_resources(Settings())["storage"].read_json(layout.DERIVATIVE_LATEST)["version"]
    trained = registry.client().get_model_version(registry.model_name, latest)
    assert f"derivative v{trained.version}: Not kept: slice" in said and "Moved: nothing" in said, said
    assert trained.tags["derivative_of"] == champion and trained.tags["model_size"] == "micro"
    assert trained.tags["derivative_verdict"] == "not kept" and float(trained.tags["speedup"]) > 1.5
    assert registry.version(FAST_ALIAS) is None and str(registry.version(CHAMPION).version) == champion

    mp.setenv("RMI_DERIVATIVE_TOLERANCE", "0.5")
    mp.setenv("RMI_DERIVATIVE_MIN_SPEEDUP", "0.5")

    def judged(version: str):
        settings = Settings()
        resources = build_resources(settings)
        resources["storage"].write_json(layout.DERIVATIVE_LATEST, {"version": version, "champion": champion})
        with DagsterInstance.get() as instance:
            out = materialize([fast_model], resources=resources, instance=instance)
        return out.asset_materializations_for_node("fast_model")[0].metadata

    settings = Settings()
    weights = registry.checkpoint(champion)[1]
    copies = []
    for _ in range(2):
        with registry.run("copy of the champion", tags={}) as run_id:
            copies.append(str(registry.register_model(run_id, weights, settings.recipe, {}, alias=None).version))
    kept = judged(copies[0])
    assert kept["verdict"].value == "kept" and kept["moved"].value == f"fast: none -> v{copies[0]}", \
        kept["reason"].value
    assert str(registry.version(FAST_ALIAS).version) == copies[0]
    assert str(registry.version(CHAMPION).version) == champion

    mp.setenv("RMI_SERVE_MODEL", "fast")
    mp.setenv("RMI_CANARY_SHARE", "0.5")
    mp.setenv("RMI_CANARY_MIN_EVENTS", "10")
    settings = Settings()
    with gateway_in_thread(settings) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/v1/answers", json={"prompts": ["12+34="], "user_id": "u0"}).json()["answers"][0][
            "model_version"] == copies[0]  # the fast model answers
        assert judged(copies[1])["moved"].value == "canary for fast"  # a gateway serves `fast`: a canary first
        canary = registry.version(CANARY)
        assert str(canary.version) == copies[1] and canary.tags[CANARY_FOR] == FAST_ALIAS
        assert str(registry.version(FAST_ALIAS).version) == copies[0]
        met = set()
        for i in range(60):
            got = http.post("/v1/answers", json={"prompts": [f"{i}+{i}="], "user_id": f"user-{i}"}).json()
            met.add(got["answers"][0]["model_version"])
            assert http.post("/v1/feedback", json={"response_id": got["answers"][0]["response_id"],
                                                   "rating": "up"}).status_code == 202
        assert met == set(copies)  # the canary's share of the fast gateway's users meets it
        http.post("/v1/flush")
    warehouse_events(settings)
    with DagsterInstance.get() as instance:
        result = materialize([canary_verdict], resources=build_resources(settings), instance=instance)
    verdict = result.asset_materializations_for_node("canary_verdict")[0].metadata
    assert verdict["verdict"].value == "promote", verdict["reason"].value
    assert str(registry.version(FAST_ALIAS).version) == copies[1] and registry.version(CANARY) is None
    assert str(registry.version(CHAMPION).version) == champion  # a derivative never moves the champion
