"""The whole loop, for real: world -> feedback -> Dagster -> Lightning -> MLflow aliases, in a temporary home.

One `rmi run --cycles 1` (a first model, then one improvement cycle) is shared by these tests.
"""

import json
from pathlib import Path

import pytest
import torch
from dagster import AssetKey, DagsterInstance, instance_for_test, materialize

from rmi_pipeline.assets import candidate_evaluation, champion
from rmi_pipeline.cli.main import main
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.settings import DEFAULT_MIX, SOURCES, Settings
from rmi_pipeline.settings import DEFAULT_RECIPE as RECIPE_PATH


@pytest.fixture
def loop(loop_home, monkeypatch):
    monkeypatch.setenv("RMI_HOME", str(loop_home["home"]))
    settings = Settings()
    return loop_home | {"settings": settings, **build_resources(settings)}


def test_the_first_model_is_promoted_and_a_better_challenger_takes_over(loop):
    first, second = loop["summary"]
    assert loop["exit_code"] == 0
    assert first["verdict"] == "promote" and first["champion_version"] == first["challenger_version"] == "1"
    assert second["challenger_version"] == "2"
    assert second["verdict"] == "promote (canary)", second["reason"]  # the gate, then users through rmi serve
    assert second["champion"]["mean"] > first["champion"]["mean"]
    registry = loop["registry"]
    assert registry.version("champion").version == 2
    assert registry.version("champion").tags["gate_verdict"] == "promote"
    alerts = json.loads((loop["home"] / "alerts_sent.json").read_text())  # each promotion told a person once
    assert {"promotion-1", "promotion-2"} <= set(alerts["sent"]) and not alerts["outbox"]


def test_feedback_reached_the_warehouse_and_every_row_is_accounted_for(loop):
    ingest = loop["summary"][1]["ingest"]
    assert ingest["batches"] == 1 and ingest["failed"] == 0
    assert ingest["rows_in"] == ingest["ingested"] + ingest["duplicates"] + ingest["quarantined"]
    # the world's buggy client garbles a few feedback bodies: the gateway refuses them (422), so none lands
    assert loop["summary"][1]["world"]["refused"] == loop["summary"][1]["world"]["garbled"] >= 1
    assert ingest["quarantined"] == 0
    events = loop["warehouse"].query("SELECT count(*) AS n FROM feedback_events")["n"][0]
    closing = loop["summary"][-1]["closing"]["ingest"]  # the round of users that judged the last canary
    assert closing["rows_in"] == closing["ingested"] > 0 and events == ingest["ingested"] + closing["ingested"]


def test_a_model_leads_back_to_its_dataset_batches_and_run(loop):
    mv = loop["registry"].version("champion")
    storage = loop["storage"]
    manifest = storage.read_json(layout.dataset_manifest(mv.tags['dataset_version']))
    assert mv.tags["feedback_batches"] == ",".join(manifest["batches"]) and len(manifest["batches"]) == 1
    assert storage.exists(layout.incoming(manifest['batches'][0]))
    assert mv.tags["warm_start_from"] == "1" and mv.tags["code_version"]
    instance = DagsterInstance.from_config(str(loop["settings"].dagster_home))
    run = instance.get_run_by_id(mv.tags["dagster_run_id"])
    assert run.job_name == "improvement_cycle" and run.tags["rmi/cycle"] == "1"


def test_each_health_check_reused_the_scores_its_cycle_s_evaluation_gave_the_champion(loop):
    instance = DagsterInstance.from_config(str(loop["settings"].dagster_home))
    checks = instance.fetch_materializations(AssetKey("champion_health"), limit=20).records
    instance.dispose()
    assert len(checks) >= 2  # after the first model and after the cycle
    assert all(r.asset_materialization.metadata["eval_scores"].value.startswith("reused") for r in checks)


def test_each_source_of_the_training_mix_has_its_rows_and_loss_logged(loop):
    mv = loop["registry"].version("champion")  # the cycle-1 candidate
    manifest = loop["storage"].read_json(layout.dataset_manifest(mv.tags['dataset_version']))
    # the default mix, the full method: the users' feedback (thumbs-downs by KTO too), replay, and every source the
    # champion makes (each source the default gives a share)
    assert set(manifest["by_source"]) == {s for s in SOURCES if DEFAULT_MIX[s]}, manifest["by_source"]
    metrics = loop["registry"].client().get_run(mv.run_id).data.metrics
    for source, rows in manifest["by_source"].items():
        assert metrics[f"rows_{source}"] == rows > 0 and metrics[f"loss_{source}"] >= 0, source


def test_the_mlflow_ui_shows_each_candidate_s_eval_results_dataset_and_verdict(loop):
    registry = loop["registry"]
    mv = registry.version("champion")  # the cycle-1 candidate, judged against v1
    report = loop["storage"].read_json(layout.evaluation(str(mv.version)))
    run = registry.client().get_run(mv.run_id)
    metrics, decision = run.data.metrics, report["decision"]
    assert metrics["eval_anchor_mean"] == pytest.approx(report["scores"]["challenger_anchor_mean"])
    assert metrics["champion_anchor_mean"] == pytest.approx(report["scores"]["champion_anchor_mean"])
    assert metrics["gate_gain_low"] == pytest.approx(decision["gain_low"], abs=1e-4) and metrics["gate_promote"] == 1
    assert {f"eval_slice/{s['name']}" for s in decision["slices"]} <= set(metrics)
    [dataset] = run.inputs.dataset_inputs
    assert dataset.dataset.name == mv.tags["dataset_version"] and "train.parquet" in dataset.dataset.source
    assert dataset.tags[0].value == "training"
    described = registry.client().get_model_version(registry.model_name, str(mv.version)).description
    assert f"Gate: promote against champion v1. {decision['reason']}" in described


def register(loop, module, name: str) -> int:
    with loop["registry"].run(name, tags={}) as run_id:
        return loop["registry"].register_model(run_id, ArithmeticRecipe().checkpoint(module), RECIPE_PATH,
                                               tags={"dataset_version": "none"}).version


def evaluate_challenger(loop, settings: Settings | None = None, instance=None) -> tuple[bool, dict]:
    """Run candidate_evaluation and champion on whatever is @challenger; (promoted?, the evaluation report)."""
    with instance_for_test() as scratch:
        result = materialize([candidate_evaluation, champion], instance=instance or scratch,
                             resources={"settings": settings or loop["settings"],
                                        **{k: loop[k] for k in ("storage", "eval_store", "registry", "notifier",
                                                                "warehouse")}})
    assert result.success
    promoted = any(e.asset_key.to_user_string() == "champion" for e in result.get_asset_materialization_events())
    [gate] = [c for c in result.get_asset_check_evaluations() if c.check_name == "gate"]
    assert gate.passed == promoted  # the UI's green or warning says what the gate decided
    [table] = [e.materialization.metadata["slices"] for e in result.get_asset_materialization_events()
               if e.asset_key == candidate_evaluation.key]
    assert {r.data["slice"] for r in table.records} >= {"add/1", "sub/1"}
    version = loop["registry"].version("challenger").version
    return promoted, json.loads(loop["storage"].read_bytes(layout.evaluation(version)))


def test_random_weights_challengers_are_never_promoted_and_the_champion_stays(loop):
    registry = loop["registry"]
    before = registry.version("champion").version
    for seed in range(2):  # each a whole evaluation of the sealed suite, about 10 s of CPU
        torch.manual_seed(seed)
        register(loop, ArithmeticRecipe().build_model(learning_rate=0.0, max_steps=1), f"random-{seed}")
        promoted, report = evaluate_challenger(loop)
        assert not promoted and report["decision"]["gain_high"] < 0, report["decision"]["reason"]
        assert registry.version("champion").version == before


def test_the_ui_does_not_call_the_champion_stale_after_its_canary_won_or_a_challenger_was_rejected(loop, tmp_path):
    """Unsynced in the UI invites a click on Materialize, which would run the gate's promotion again."""
    import shutil

    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._core.loader import LoadingContextForTest

    from rmi_pipeline.definitions import build_definitions

    shutil.copytree(loop["home"] / "dagster", tmp_path / "dagster")  # the loop's own instance, copied
    instance = DagsterInstance.from_config(str(tmp_path / "dagster"))
    graph = build_definitions(loop["settings"]).resolve_asset_graph()

    def status():
        return CachingStaleStatusResolver(instance, graph, LoadingContextForTest(instance)).get_status(champion.key)

    # cycle 1's challenger won its canary trial: canary_verdict recorded the champion, after its evaluation
    assert status() == StaleStatus.FRESH
    torch.manual_seed(0)
    register(loop, ArithmeticRecipe().build_model(learning_rate=0.0, max_steps=1), "random-stale")
    promoted, _ = evaluate_challenger(loop, instance=instance)
    assert not promoted and status() == StaleStatus.FRESH  # rejected: the champion is what it should be
    instance.dispose()


def test_a_challenger_that_memorized_the_anchor_is_caught(loop, monkeypatch):
    """A challenger that knows the private anchor items by heart: its anchor score jumps, the fresh set's does not.

    (Training the champion on the anchor items no longer shows as a leak: this model learns the skill from them,
    and the fresh set rises as much, 0.83 -> 1.00 pooled. What keeps eval items out of training is the hash filter.)
    The memorizer is scripted (tests/knowing_recipe.py): the champion's weights, nudged, plus the anchor's answers."""
    import hashlib

    from knowing_recipe import RemembersAnchor

    registry = loop["registry"]
    anchor = loop["eval_store"].read_json("anchor/suite.json")["items"]
    nudged = ArithmeticRecipe().load_checkpoint(registry.checkpoint("champion")[1])
    with torch.no_grad():
        nudged.model.ln_f.bias.add_(1e-6)  # other bytes, the same answers
    version = register(loop, nudged, "memorized")
    data = registry.checkpoint("challenger")[1]
    assert registry.version("challenger").version == version
    monkeypatch.setattr(RemembersAnchor, "memorizer", hashlib.sha256(data).hexdigest())
    monkeypatch.setattr(RemembersAnchor, "remembered", {i["prompt"]: i["answer"] for i in anchor})
    promoted, report = evaluate_challenger(loop, loop["settings"].model_copy(
        update={"recipe": "knowing_recipe:RemembersAnchor"}))
    assert not promoted
    assert "likely leak: anchor" in report["decision"]["reason"]
    assert report["decision"]["leaks"]["anchor"] > 0.10


def test_a_challenger_that_learned_a_verifier_loophole_is_held_back_until_a_person_clears_it(loop, tmp_path,
                                                                                               monkeypatch):
    """A team whose verifier checks only an answer's last two digits, and whose eval is scored by the same check
    (world/hackable.py). Its challenger learned the loophole (differences with the ones, tens and width right, the
    digits between wrong; scripted in tests/knowing_recipe.py, trained in tests/test_hackable.py): the gate, blind
    to the loophole, would promote it. The probes hold it back: the run stops before promotion, the
    champion stays, the version carries the finding and the evidence, one alert offers "Promote anyway" and the
    run's failure raises no second; `rmi promote` clears it, audited. In a copy of the loop's home: the promotion
    at the end stays there."""
    import hashlib
    import shutil

    from dagster import DagsterEventType, build_run_status_sensor_context
    from knowing_recipe import LearnedTheLoophole

    from rmi_pipeline.automation.alerts import run_failure_alert

    home = tmp_path / "home"
    shutil.copytree(loop["home"], home)
    for key, value in {"RMI_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"),
                       "RMI_RECIPE": "knowing_recipe:LearnedTheLoophole",
                       "RMI_EVAL_SCORER": "rmi_pipeline.world.hackable:loophole_score"}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    resources = build_resources(settings)
    registry, notifier = resources["registry"], resources["notifier"]
    before = str(registry.version("champion").version)
    nudged = ArithmeticRecipe().load_checkpoint(registry.checkpoint("champion")[1])
    with torch.no_grad():
        nudged.model.ln_f.bias.add_(1e-6)  # other bytes: the hacker's
    version = str(register({"registry": registry}, nudged, "learned-a-loophole"))
    monkeypatch.setattr(LearnedTheLoophole, "hacker", hashlib.sha256(registry.checkpoint("challenger")[1]).hexdigest())

    instance = DagsterInstance.get()
    result = materialize([candidate_evaluation, champion], instance=instance, raise_on_error=False,
                         resources={"settings": settings, **{k: resources[k] for k in (
                             "storage", "eval_store", "registry", "notifier", "warehouse")}})
    assert not result.success  # stopped before promotion, by the blocking check
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert "The gate alone: Promoted" in checks["gate"].description  # it would have promoted it
    assert not checks["reward_hacking"].passed
    # the verifier's passes held against the audit (the exact check): its gain is not real
    probe = "signal_up_truth_flat/verifier"
    assert probe in checks["reward_hacking"].metadata["fired"].value
    assert f"| {probe} | **yes** |" in checks["reward_hacking"].metadata["findings"].value
    assert str(registry.version("champion").version) == before
    report = resources["storage"].read_json(layout.evaluation(version))
    assert not report["decision"]["promote"] and probe in report["probes"]["fired"]
    finding = resources["eval_store"].read_json(layout.probes(version))
    fired = {f["probe"]: f for f in finding["findings"] if f["fired"]}
    assert finding["truth"] == "audit" and len(fired[probe]["examples"]) == 3
    gains = fired[probe]["counts"]
    assert gains["signal_gain"] > 0 > gains["truth_gain"] and gains["signal_gain"] - gains["truth_gain"] > 0.05
    assert "suspected_reward_hack" in registry.tags_of(version)

    state = Path(notifier.state_path)
    raised = json.loads(state.read_text())["sent"]
    assert f"reward-hack-{version}" in raised
    run = instance.get_run_by_id(result.run_id)
    failure = instance.all_logs(result.run_id, of_type=DagsterEventType.RUN_FAILURE)[0].dagster_event
    run_failure_alert(build_run_status_sensor_context(sensor_name="run_failure_alert", dagster_event=failure,
                                                      dagster_instance=instance, dagster_run=run,
                                                      resources={"notifier": notifier}).for_run_failure())
    assert json.loads(state.read_text())["sent"].keys() == raised.keys()  # no second alert for the run

    assert main(["promote", version, "--reason", "the audit is too strict on sub"]) == 0
    assert str(registry.version("champion").version) == version
    assert registry.tags_of(version)["suspected_reward_hack_cleared"].endswith("the audit is too strict on sub")


def test_a_person_can_roll_back_and_promote_by_hand_with_an_audit_trail(loop, monkeypatch):
    registry = loop["registry"]
    monkeypatch.setenv("DAGSTER_HOME", str(loop["settings"].dagster_home))
    current = str(registry.version("champion").version)
    history = registry.champion_history()
    assert history[-1] == current and len(history) == 2
    assert main(["rollback", "--reason", "answers got worse for customers"]) == 0
    back = registry.version("champion")
    assert str(back.version) == history[-2]
    assert back.tags["override_action"] == "rollback" and back.tags["override_reason"].startswith("answers")
    assert back.tags["override_by"] and back.tags["override_at"]
    assert main(["promote", current, "--reason", "fixed upstream"]) == 0
    again = registry.version("champion")
    assert str(again.version) == current and again.tags["override_reason"] == "fixed upstream"
    instance = DagsterInstance.get()
    events = instance.fetch_materializations(AssetKey("champion"), limit=10).records
    reasons = [e.asset_materialization.metadata["override_reason"].value for e in events
               if "override_reason" in e.asset_materialization.metadata]
    assert reasons[:2] == ["fixed upstream", "answers got worse for customers"]
    assert main(["promote", "999", "--reason", "typo"]) == 2
    assert main(["rollback", "--reason", " "]) == 2


def test_the_eval_warns_when_no_slice_is_left_to_improve_on(loop):
    """The cycle-1 champion still fails most long sums (headroom); a model that saturated every slice would not."""
    import numpy as np

    from rmi_pipeline.assets.evaluation import headroom
    from rmi_pipeline.ml.gate import Paired

    report = json.loads(loop["storage"].read_bytes(layout.evaluation(loop['registry'].version('champion').version)))
    counted = {s["name"] for s in report["decision"]["slices"] if s["counted"]}
    scores = {s["name"]: s["challenger"] for s in report["decision"]["slices"]}
    check = headroom({n: Paired(np.array([scores[n]])) for n in counted}, counted)
    hardest = check.metadata["hardest_slice"].value
    assert check.passed and scores[hardest] < 0.5 and int(hardest.split("/")[1]) > 4  # users asked up to 5 digits
    saturated = headroom({n: Paired(np.ones(20)) for n in counted}, counted)
    assert not saturated.passed and saturated.metadata["slices_under_headroom"].value == 0


def test_the_champion_practises_for_its_successor_with_every_source_on(loop, tmp_path, monkeypatch):
    """The practice asset on the loop's champion, in a copy of its home (the shared loop is left as it was)."""
    import shutil

    import polars as pl

    from rmi_pipeline.assets import practice

    home = tmp_path / "home"
    shutil.copytree(loop["home"], home)
    monkeypatch.setenv("RMI_HOME", str(home))
    monkeypatch.setenv("RMI_MIX", json.dumps({"practice": 0.1, "rl": 0.1, "hint_distill": 0.05, "self_label": 0.05}))
    for key in ("RMI_PRACTICE_PROBLEMS", "RMI_PRACTICE_FAILED_PROMPTS"):
        monkeypatch.setenv(key, "60")
    monkeypatch.setenv("RMI_SELF_LABEL_PROBLEMS", "200")
    resources = build_resources(Settings())
    with instance_for_test() as instance:
        result = materialize([practice], instance=instance,
                             resources={k: resources[k] for k in ("settings", "storage", "warehouse", "registry")})
    assert result.success
    meta = {k: v.value for k, v in result.asset_materializations_for_node("practice")[0].metadata.items()}
    latest = resources["storage"].read_json(layout.PRACTICE_LATEST)
    assert latest["champion_version"] == str(resources["registry"].version("champion").version)
    rows = resources["storage"].read_parquet(latest["rows"])
    counts = dict(rows.group_by("source").len().iter_rows())
    assert {"practice", "rl", "hint_distill"} <= set(counts) and meta["rows"] == len(rows) == sum(counts.values())
    recipe = ArithmeticRecipe()
    assert all(recipe.verify(p, t)[0] == 1 for p, t in rows.filter(pl.col("source") == "practice")
               .select("prompt", "target").iter_rows())  # practice keeps only what the verifier accepts
    pushed = rows.filter((pl.col("source") == "rl") & (pl.col("scale") < 0))
    assert len(pushed) and pushed["reference"].null_count() == 0  # each wrong sample names a right one
    labels = rows.filter(pl.col("source") == "self_label")
    assert meta["self_labels"] == len(labels) == sum(v for k, v in meta.items() if k.startswith("self_labels "))

    # the gate turns a candidate down and nothing new arrives: the next turn practises on other problems
    registry = resources["registry"]
    with registry.run("turned-down", tags={}) as run_id:
        registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)), RECIPE_PATH, tags={})
    monkeypatch.setenv("RMI_MIX", json.dumps({"practice": 0.1}))
    with instance_for_test() as instance:
        again = materialize([practice], instance=instance,
                            resources={"settings": Settings(), **{k: resources[k] for k in ("storage", "warehouse",
                                                                                          "registry")}})
    retried = {k: v.value for k, v in again.asset_materializations_for_node("practice")[0].metadata.items()}
    assert retried["retry"] == meta["retry"] + 1 and retried["champion_version"] == meta["champion_version"]
    solved = resources["storage"].read_parquet(resources["storage"].read_json(layout.PRACTICE_LATEST)["rows"])
    before = set(rows.filter(pl.col("source") == "practice")["prompt"])
    assert len(solved) and len(before & set(solved["prompt"])) < len(solved) / 2


def test_the_champion_answers_from_memory_what_it_answered_as_the_challenger_and_the_same_way(loop):
    from rmi_pipeline.assets.evals import remembered
    from rmi_pipeline.ml.scored import item_key
    from rmi_pipeline.ml.tasks import Task

    instance = DagsterInstance.from_config(str(loop["settings"].dagster_home))
    latest = instance.fetch_materializations(AssetKey("candidate_evaluation"), limit=1).records[0]
    instance.dispose()
    meta = latest.asset_materialization.metadata
    decoded, items = meta["items_decoded"].value, meta["eval_items"].value
    # champion v1 answered the anchor and the public set as cycle 0's challenger: only the new sets are decoded;
    # the challenger, a new model, answers every item (an item in two sets, once)
    assert 0 < decoded["champion"] <= sum(items.values()) - items["anchor"] - items["public"] < decoded["challenger"]
    registry, eval_store, recipe = loop["registry"], loop["eval_store"], ArithmeticRecipe()
    v1 = registry.client().get_model_version(registry.model_name, "1")
    memo = remembered(recipe, registry, eval_store, v1)
    anchor = [Task(**i) for i in eval_store.read_json(layout.ANCHOR)["items"]]
    assert all(item_key(t) in memo.known for t in anchor)
    assert [memo.known[item_key(t)] for t in anchor] == recipe.correct(memo.model, anchor)  # what decoding says
