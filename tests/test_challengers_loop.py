"""Several challengers per cycle, on a copy of the loop run's home: an improvement_cycle with RMI_CHALLENGERS=2 trains
two candidates at the same time (Dagster's multiprocess executor, a step and a Pipes launch each), groups them under
one MLflow parent run, picks the better on the sealed eval, and the gate judges the winner at its level divided by two
(or, with a split, on the items that did not choose it only); the loser never becomes the challenger."""

import shutil

import pytest
from conftest import FAST

from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.resources.registry import CHALLENGER, CHAMPION
from rmi_pipeline.settings import Settings


@pytest.fixture(scope="module")
def two_home(loop_home, tmp_path_factory):
    home = tmp_path_factory.mktemp("challengers") / "home"
    shutil.copytree(loop_home["home"], home, ignore=shutil.ignore_patterns("dagster", "serve", "training_worker"))
    env = {**FAST, "RMI_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "RMI_CHALLENGERS": "2",
           "RMI_MAX_PARALLEL_TRAINING": "2", "RMI_CHALLENGER_GRID": '{"learning_rate": [0.003, 0.0003]}',
           "RMI_TRAIN_STEPS": "60", "RMI_PROBE_ITEMS": "50",
           # how the candidates are chosen and gated is under test, not what they learn: little practice, no reward
           # model, a small fresh eval set (the sealed suite, copied, still holds 40 items a slice)
           "RMI_PRACTICE_PROBLEMS": "20", "RMI_SELF_LABEL_PROBLEMS": "20", "RMI_PRACTICE_FAILED_PROMPTS": "20",
           "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE": "10", "RMI_MIX": '{"best_of_n": 0}'}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        (home / "dagster").mkdir()
        yield home


def test_two_challengers_train_side_by_side_and_the_winner_is_gated_at_the_level_divided_by_two(two_home):
    from dagster import DagsterInstance, execute_job, reconstructable

    from rmi_pipeline.automation.jobs import cycle_run_config
    from rmi_pipeline.definitions import improvement_cycle_job

    settings = Settings()
    resources = build_resources(settings)
    registry, storage = resources["registry"], resources["storage"]
    champion = str(registry.version(CHAMPION).version)
    with DagsterInstance.get() as instance:
        result = execute_job(reconstructable(improvement_cycle_job), instance, run_config=cycle_run_config(settings))
        assert result.success
        trainings = [e for e in result.all_events if e.event_type_value == "STEP_START"
                     and e.step_key.startswith("candidate_model.train_challenger")]
        assert len(trainings) == 2 and len({e.pid for e in trainings}) == 2  # each in a process of its own

    trained = storage.read_json(layout.CHALLENGERS_LATEST)
    versions = [registry.client().get_model_version(registry.model_name, v) for v in trained["versions"]]
    assert len(versions) == 2
    parents = {registry.client().get_run(mv.run_id).data.tags["mlflow.parentRunId"] for mv in versions}
    assert parents == {trained["mlflow_parent_run_id"]}  # one MLflow parent run groups them
    rates = sorted(float(registry.client().get_run(mv.run_id).data.params["learning_rate"]) for mv in versions)
    assert rates == [0.0003, 0.003]  # the grid's learning rates, one each

    winner, loser = chosen_and_lost(registry, storage, versions)
    from rmi_pipeline.cli.report import status_text

    said = status_text(settings)  # `rmi status` names the winner, the runner-up and the spread
    assert f"chosen among several: v{winner.version} won the selection among 2 candidates" in said, said
    assert f"ahead of v{loser.version}'s" in said and "spread" in said
    report = storage.read_json(layout.evaluation(winner.version))
    assert str(report["champion_version"]) == champion
    reason = report["decision"]["reason"]
    # chosen on every item: the gate's 98% intervals become 99% ones (its one-sided level halved)
    assert "99% interval" in reason and "divided by 2" in reason, reason
    moved = str(registry.version(CHAMPION).version)
    assert moved == (str(winner.version) if report["decision"]["promote"] else champion) != str(loser.version)


def test_with_a_split_the_winner_is_gated_only_on_the_items_that_did_not_choose_it(two_home, monkeypatch):
    from dagster import DagsterInstance

    from rmi_pipeline.assets.evals import load_sets
    from rmi_pipeline.assets.sealed import in_part
    from rmi_pipeline.definitions import build_definitions
    from rmi_pipeline.ml.scored import eval_tasks
    from rmi_pipeline.recipes.base import load_recipe

    monkeypatch.setenv("RMI_SELECTION_SHARE", "0.5")
    monkeypatch.setenv("RMI_MAX_PARALLEL_TRAINING", "1")  # in turn, in the run's process
    settings = Settings()
    resources = build_resources(settings)
    registry, storage = resources["registry"], resources["storage"]
    with DagsterInstance.get() as instance:
        result = build_definitions(settings).resolve_job_def("improvement_cycle").execute_in_process(
            instance=instance)
    trained = storage.read_json(layout.CHALLENGERS_LATEST)
    versions = [registry.client().get_model_version(registry.model_name, v) for v in trained["versions"]]
    winner, _ = chosen_and_lost(registry, storage, versions)
    report = storage.read_json(layout.evaluation(winner.version))
    assert "did not choose it among 2 challengers" in report["decision"]["reason"]
    manifest = storage.read_json(layout.EVAL_MANIFEST)
    tasks = eval_tasks({**load_sets(resources["eval_store"], manifest),
                        "public": [vars(t) for t in load_recipe(settings.recipe).public_eval()]})
    chose = in_part(tasks, winner.tags["selection_salt"], float(winner.tags["selection_share"]))
    assert 0 < chose.sum() < len(tasks)
    selected = result.asset_materializations_for_node("challenger_selection")[0].metadata
    judged = result.asset_materializations_for_node("candidate_evaluation")[0].metadata["gated_items"].value
    # the items that chose and the items that judged are the two parts of the suite, nothing shared
    assert (selected["selection_items"].value, judged) == (int(chose.sum()), len(tasks) - int(chose.sum()))


def chosen_and_lost(registry, storage, versions):
    """(winner, loser) of the two: the winner holds the alias `challenger` and scored highest on what chose it."""
    chosen = storage.read_json(layout.SELECTION_LATEST)
    winner = registry.version(CHALLENGER)
    assert str(winner.version) == chosen["winner"] and winner.tags["selection"] == "won"
    scores = {c["version"]: c["score"] for c in chosen["candidates"]}
    assert scores[str(winner.version)] == max(scores.values())
    loser = next(mv for mv in versions if mv.version != winner.version)
    assert registry.tags_of(loser.version)["selection"] == f"lost to v{winner.version}"
    return winner, loser
