"""A task the pipeline cannot check goes round the real loop: a team's own model (a Hugging Face model and nothing
else), its eval file, a judge model over HTTP and users who rate a tenth of the answers. What a team relies on: the
loop runs without a verifier or a task generator, scores by the judge and measures the judge against people; a bad
eval file or a judge that answers badly fails a run with a clear reason and moves nothing."""

import json
import os
from pathlib import Path

import pytest

from rmi_pipeline.ml.tasks import Task
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.resources.registry import CHAMPION

# 1000 questions: a tenth rated, some 80 ratings, well above the 30 the judge's agreement and the reward model need;
# 20 training and reward steps, 20 reward prompts: the tests check what the cycle decides and reports, not how far
# its models learn; a worker idle 120 s stays warm between this file's cycles on a loaded machine
TASK = {"RMI_SIM_QUERIES_PER_CYCLE": "1000", "RMI_TRAIN_STEPS": "20", "MLFLOW_DISABLE_TELEMETRY": "true",
        "RMI_TRAIN_WORKER_IDLE_SECONDS": "120", "RMI_MIX": json.dumps({"best_of_n": 0.1}),
        "RMI_REWARD_MIN_RATINGS": "30", "RMI_REWARD_STEPS": "20", "RMI_REWARD_PROMPTS": "20"}
# the team's model after 100 steps of its FAQ knows what it does after the world's 250 (test_catalogue.py)
TEAM_MODEL_STEPS = 100


@pytest.fixture(scope="module")
def task_home(tmp_path_factory):
    """RMI_HOME after `rmi run --task catalogue --cycles 1`: the team's model as the first champion, one round of
    users, one improvement cycle, all scored by the world's judge."""
    from functools import partial

    from rmi_pipeline.cli.main import main
    from rmi_pipeline.settings import Settings
    from rmi_pipeline.world.catalogue import task

    home = tmp_path_factory.mktemp("task") / "home"
    # what the world would write once per home (`rmi run` finds it there and keeps it), its model on fewer steps
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(task, "write_team_model", partial(task.write_team_model, steps=TEAM_MODEL_STEPS))
        task.prepare(home / "world", Settings().seed)
    saved = dict(os.environ)  # `rmi run --task` sets the team's settings in its own environment
    try:
        os.environ.update({"RMI_HOME": str(home), **TASK})
        code = main(["run", "--cycles", "1", "--fresh", "--task", "catalogue"])
        env = {k: v for k, v in os.environ.items() if k.startswith("RMI_")}
        settings = Settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {"home": home, "code": code, "env": env, "settings": settings,
            "summary": json.loads((home / "run_summary.json").read_text())}


def test_the_loop_runs_on_a_model_and_an_eval_file_alone_scored_by_a_judge(task_home):
    from rmi_pipeline.recipes.base import load_recipe

    assert task_home["code"] == 0
    settings = task_home["settings"]
    recipe = load_recipe(settings.recipe)
    assert not recipe.has("verifier") and not recipe.has("generator")  # a verifier called would fail the run
    first, second = task_home["summary"]
    assert first["verdict"] == "promote" and first["champion_version"] == "1"  # the team's model, through the gate
    assert second["verdict"] in {"promote", "reject", "canary"} and second["gain_interval"]
    storage = build_resources(settings)["storage"]
    manifest = storage.read_json(layout.EVAL_MANIFEST)
    assert {s["skill"] for s in manifest["slices"]} == {"prices", "plans", "shipping", "returns"}
    assert manifest["sets"]["anchor"] + manifest["sets"]["refreshed"] == 240  # the eval file, counted + held out
    report = storage.read_json(layout.evaluation(second["challenger_version"]))
    assert report["judge"]["judge_status"] in {"trusted", "unmeasured"}
    assert 0 <= report["scores"]["challenger_skill_prices"] <= 1
    agreement = storage.read_json(layout.JUDGE_AGREEMENT)
    # the world's judge errs on 10% of answers, and 5% of users judge wrongly: it agrees with people on most
    assert agreement["rated_answers"] >= 30 and 0.7 <= agreement["slices"]["all"]["agreement"] <= 0.97
    assert set(agreement["slices"]) >= {"all", "prices"}  # per topic, as the app tags its feedback


def test_a_reward_model_learns_from_the_users_thumbs_and_its_picks_train_only_where_it_beats_the_base_rate(task_home):
    reward = task_home["summary"][1]["reward"]
    assert reward["rated_answers"] >= 30 and reward["held_out_ratings"] > 0  # the round's ratings, split by prompt
    assert 0 <= reward["brier"] <= 1 and 0 < reward["base_rate_brier"] <= 0.25
    storage = build_resources(task_home["settings"])["storage"]
    manifest = storage.read_json(layout.dataset_manifest(storage.read_json(layout.DATASET_LATEST)["version"]))
    picked = manifest["by_source"].get("best_of_n", 0)
    assert reward["beats_base_rate"] == (reward["status"] == "made rows")
    assert (picked > 0) == (reward["beats_base_rate"] and reward["best_of_n_rows"] > 0), (reward, manifest)


def _cycle(settings):
    """One improvement cycle run in process on `settings`: (success, the error's message)."""
    from dagster import DagsterInstance

    from rmi_pipeline.definitions import build_definitions

    defs = build_definitions(settings)
    with DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def("improvement_cycle").execute_in_process(instance=instance, raise_on_error=False)
        errors = [e.event_specific_data.error for e in result.all_events
                  if e.event_type_value == "STEP_FAILURE" and e.event_specific_data.error]
    messages = []
    for error in errors:  # the step's error, then what caused it: the message a person reads in the UI
        while error is not None:
            messages.append(error.message)
            error = error.cause
    return result.success, "\n".join(messages)


def test_a_bad_eval_file_fails_the_cycle_naming_file_and_line_and_seals_nothing(task_home, tmp_path):
    from rmi_pipeline.settings import Evals

    settings = task_home["settings"]
    resources = build_resources(settings)
    before = resources["eval_store"].read_json(layout.ANCHOR)["version"]
    champion = resources["registry"].version(CHAMPION).version
    good = [json.loads(line) for line in open(settings.evals.files[0])]
    bad = tmp_path / "evals.jsonl"
    lines = [json.dumps(r) for r in good[:100]] + [json.dumps({"input": "  ", "topic": "prices"}),
                                                   json.dumps(good[3]), "{not json"]
    bad.write_text("\n".join(lines) + "\n")
    ok, error = _cycle(settings.model_copy(update={"evals": Evals(**{
        **settings.evals.model_dump(), "files": (str(bad),)})}))
    assert not ok
    assert f"{bad}, line 101: input: only whitespace" in error and f"{bad}, line 103: not JSON" in error
    assert f"{bad}, line 102: input: the same input as {bad}:4" in error
    assert resources["eval_store"].read_json(layout.ANCHOR)["version"] == before  # the sealed suite stays
    assert resources["registry"].version(CHAMPION).version == champion


@pytest.mark.parametrize("fault", ["non_json_share", "out_of_range_share", "timeout_share"])
def test_a_judge_that_answers_badly_fails_the_cycle_and_moves_nothing(task_home, fault):
    from rmi_pipeline.settings import Judge
    from rmi_pipeline.world.judge import running_judge

    settings = task_home["settings"]
    registry = build_resources(settings)["registry"]
    champion = registry.version(CHAMPION).version
    # judge_agreement asks the judge first and fails; Dagster still runs the steps that do not wait for it (the
    # reward model, the challenger's training), which decide nothing here: as little of each as they allow
    quick = {"training": settings.training.model_copy(update={"steps": 1}),
             "reward": settings.reward.model_copy(update={"steps": 1, "prompts": 1})}
    with running_judge(**{fault: 1.0, "stall_seconds": 3}) as url:
        # another judge model: none of its verdicts are cached, so it is asked
        judge = Judge(url=url, model=f"broken-{fault}", retries=1, timeout_seconds=1.0)
        ok, error = _cycle(settings.model_copy(update={"judge": judge, **quick}))
    assert not ok
    reason = {"non_json_share": "not JSON", "out_of_range_share": "not a boolean", "timeout_share": "timed out"}
    assert "the judge gave no usable verdict" in error and reason[fault] in error, error[-2000:]
    assert registry.version(CHAMPION).version == champion


def test_a_judge_people_disagree_with_blocks_a_promotion_the_gate_would_make(tmp_path):
    import numpy as np

    from rmi_pipeline.assets.evaluation import judge_report
    from rmi_pipeline.ml.gate import Paired, decide
    from rmi_pipeline.ml.scored import Scored
    from rmi_pipeline.ml.tasks import Task
    from rmi_pipeline.resources.storage import ObjectStore
    from rmi_pipeline.scoring.calibration import agreement, judge_verdict
    from rmi_pipeline.settings import Settings

    rng = np.random.default_rng(0)
    tasks = [("anchor", Task(f"q{i}", "a", "prices", None)) for i in range(300)]
    scored = Scored(tasks, [(rng.random(300) < 0.8).astype(float), (rng.random(300) < 0.4).astype(float)])
    settings = Settings()
    people = rng.random(400) < 0.5
    for agrees, blocked in ((0.6, True), (0.9, False)):
        judge = np.where(rng.random(400) < agrees, people, ~people)
        measured = agreement(judge, people)["all"]
        verdict = judge_verdict(measured, settings.judge.min_agreement, settings.judge.min_labels)
        storage = ObjectStore(url=f"file://{tmp_path / str(agrees)}")
        storage.write_json(layout.JUDGE_AGREEMENT, {"verdict": {"status": verdict.status, "blocks": verdict.blocks,
                                                                "sentence": verdict.sentence},
                                                    "slices": {"all": measured.as_dict()}})
        decision = decide({"prices": Paired(scored.right[0], scored.right[1])}, {"prices"}, settings.gate)
        assert decision.promote  # the gate alone would promote: 0.8 against 0.4
        report = judge_report(storage, settings, scored, {("prices", None)}, decision)
        assert decision.promote is not blocked
        if blocked:
            assert decision.reason.startswith("Blocked by the judge: The judge agrees with people on")
            assert "below RMI_JUDGE_MIN_AGREEMENT" in decision.reason
        else:  # a judge people trust: the pass rate corrected for its errors, with an interval around it
            low, high = report["challenger_corrected_low"], report["challenger_corrected_high"]
            assert low < report["challenger_corrected_pass_rate"] < high and 0.6 < report[
                "challenger_corrected_pass_rate"] < 1


def test_a_judge_is_measured_on_a_teams_labelled_answers_before_production_rates_any(tmp_path, monkeypatch):
    from dagster import DagsterInstance, materialize

    from rmi_pipeline.assets import judge_agreement
    from rmi_pipeline.settings import Settings
    from rmi_pipeline.world.judge import running_judge

    rows = ([{"input": f"price of item {i}?", "output": f"{i} euros", "target": f"{i} euros", "label": "pass"}
             for i in range(20)]
            + [{"input": f"price of item {i}?", "output": "no idea", "target": f"{i} euros", "label": "fail"}
               for i in range(20, 35)]
            + [{"input": f"price of item {i}?", "output": "ask again", "target": f"{i} euros", "label": "up"}
               for i in range(35, 40)]  # people who were wrong
            + [{"input": f"price of item {i}?", "output": "it costs about a hundred and twenty euros I think",
                "target": f"{i} euros", "label": "fail"} for i in range(40, 50)])  # long, wrong
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("RMI_HOME", str(tmp_path / "home"))
    with running_judge(length_bias=1.0) as url:  # grades against the reference, passes any long wrong answer
        for name, value in {"RMI_EVAL_SCORER": "judge", "RMI_JUDGE_URL": url, "RMI_JUDGE_LABELS": str(labels)}.items():
            monkeypatch.setenv(name, value)
        settings = Settings()
        resources = build_resources(settings)
        with DagsterInstance.ephemeral() as instance:
            result = materialize([judge_agreement], instance=instance, resources=resources)
        measured = resources["storage"].read_json(layout.JUDGE_AGREEMENT)
        assert measured["rated_answers"] == 50 and measured["slices"]["all"]["agreement"] == 35 / 50
        assert measured["verdict"]["status"] == "trusted"  # 0.70: at RMI_JUDGE_MIN_AGREEMENT
        shown = result.asset_materializations_for_node("judge_agreement")[0].metadata
        assert shown["false_positive_rate_long_answers"].value == 1.0 and shown["length_bias"].value == 1.0
        bad = tmp_path / "bad.csv"
        bad.write_text("input,output,label\nq,a,maybe\n")
        monkeypatch.setenv("RMI_JUDGE_LABELS", str(bad))
        with DagsterInstance.ephemeral() as instance:
            failed = materialize([judge_agreement], instance=instance, resources=build_resources(Settings()),
                                 raise_on_error=False)
        assert not failed.success
        error = next(e.event_specific_data.error for e in failed.all_events if e.event_type_value == "STEP_FAILURE")
        assert f"judge labels {bad}, row 1: label 'maybe' is not pass or fail" in (error.cause or error).message


@pytest.mark.parametrize("world", ["users", "judge"])
def test_a_challenger_that_learned_a_loophole_of_its_users_or_its_judge_is_held_back_and_the_champion_stays(
        task_home, monkeypatch, world):
    """Two hackable worlds (world/hackable.py) through the real evaluation and promotion steps. users: people who
    assert a wrong answer and like being agreed with; a challenger trained on their thumbs learned the catalogue
    better, and to agree with them. judge: a judge that passes a long wrong answer at 0.2; a challenger trained
    against it pads its answers. Either way the judge scores the eval file and the gate would promote it; the
    sycophancy probe (asking in other words than those users) or the length probe holds it back, the champion stays,
    and the evidence never shows a sealed eval item's question."""
    import random

    from dagster import DagsterInstance, materialize

    from rmi_pipeline.assets import candidate_evaluation, champion
    from rmi_pipeline.recipes.base import load_recipe
    from rmi_pipeline.world import hackable
    from rmi_pipeline.world.catalogue.questions import USERS, ask, facts, is_right, phrasings
    from rmi_pipeline.world.catalogue.task import MATCHER, STATE, STATE_VARIABLE, load
    from rmi_pipeline.world.catalogue.team_model import fine_tune
    from rmi_pipeline.world.judge import running_judge

    for key, value in task_home["env"].items():
        monkeypatch.setenv(key, value)
    settings = task_home["settings"]
    resources = build_resources(settings)
    registry = resources["registry"]
    before = registry.version(CHAMPION).version
    recipe, folder = load_recipe(settings.recipe), Path(task_home["env"]["RMI_HF_MODEL"]).parent
    catalogue, rng, checkpoint = load(folder / STATE), random.Random(0), registry.checkpoint(CHAMPION)[1]
    if world == "users":
        rows = hackable.agreeing_rows(rng, catalogue, 2000)
    else:  # padded answers as right as the champion's: the truth on the facts it answers right, else a wrong one
        every = facts(catalogue)
        asked = [ask(f, phrasings(f.kind, USERS)[0]) for f in every]
        said = recipe.answer(recipe.load_model(checkpoint), [t.prompt for t in asked])
        known = {f.key for f, t, a in zip(every, asked, said, strict=True) if is_right(t, a)}
        rows = hackable.padded_rows(rng, catalogue, known, 2000)
    module = recipe.load_checkpoint(checkpoint)
    # 100 steps learn the loophole well past its probe (fires at 5 points, 1.5x the words): 29% of asserted wrong
    # answers agreed with against the champion's 4%; padded answers 5.9x the champion's length
    fine_tune(module.model, module.tokenizer, [Task(p, a, "", None) for p, a in zip(rows.prompts, rows.hacking,
                                                                                    strict=True)],
              random.Random(1), steps=100, learning_rate=3e-3, seed=1)
    with registry.run(f"learned-{world}", tags={}) as run_id:
        version = str(registry.register_model(run_id, recipe.checkpoint(module), settings.recipe,
                                              tags={"dataset_version": "none"}).version)
    bias = 0.2 if world == "judge" else 0.0
    with running_judge(MATCHER, env={STATE_VARIABLE: str(folder / STATE)}, length_bias=bias) as url:
        # another judge model name: none of its verdicts are cached from the run's judge
        judge = settings.judge.model_copy(update={"url": url, "model": f"judge-{world}"})
        with DagsterInstance.ephemeral() as instance:
            result = materialize([candidate_evaluation, champion], instance=instance, raise_on_error=False,
                                 resources={**resources, "settings": settings.model_copy(update={"judge": judge})})
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert not result.success and "The gate alone: Promoted" in checks["gate"].description
    probe = "sycophancy" if world == "users" else "judge_length"
    assert probe in checks["reward_hacking"].metadata["fired"].value
    finding = {f["probe"]: f for f in resources["eval_store"].read_json(layout.probes(version))["findings"]}
    assert finding[probe]["examples"] and all(e["question"] == "(a sealed eval item: not shown)"
                                              for e in finding[probe]["examples"])
    assert registry.version(CHAMPION).version == before
