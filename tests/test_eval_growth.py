"""The eval suite grows ahead of the champion: the next tiers are sealed before the top ones saturate."""

import numpy as np
import torch
from dagster import instance_for_test, materialize
from knowing_recipe import KnowsUpTo

from rmi_pipeline.assets import eval_suite
from rmi_pipeline.ml.tasks import Task
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.settings import Settings
from rmi_pipeline.world.curators import curate_eval_suite


def test_a_champion_that_solves_the_top_tiers_makes_the_suite_seal_the_next_ones(rmi_env, monkeypatch):
    monkeypatch.setenv("RMI_RECIPE", "knowing_recipe:KnowsUpTo")
    monkeypatch.setenv("RMI_EVAL_ITEMS_PER_SLICE", "20")
    monkeypatch.setenv("RMI_EVAL_REFRESHED_ITEMS_PER_SLICE", "10")
    resources = build_resources(Settings())
    registry, eval_store, storage = resources["registry"], resources["eval_store"], resources["storage"]
    recipe = KnowsUpTo()
    curate_eval_suite(eval_store, recipe, 20, seed=0)

    def suite() -> tuple[dict, dict]:
        with instance_for_test() as instance:
            result = materialize([eval_suite], instance=instance, resources=resources)
        meta = {k: v.value for k, v in result.asset_materializations_for_node("eval_suite")[0].metadata.items()}
        return meta, storage.read_json(layout.EVAL_MANIFEST)

    meta, manifest = suite()  # no champion yet: the curated tiers
    assert meta["tiers"] == "add 1-12, sub 1-12" and meta["grown_version"] == "none"

    def promote() -> None:  # a new champion: the suite grows once per champion
        torch.manual_seed(0)
        with registry.run("champion", tags={}) as run_id:
            version = registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)),
                                              "knowing_recipe:KnowsUpTo", tags={}).version
        registry.promote(version, {"promoted_by": "test"})

    def learn(knows: int) -> None:
        """The test's champion answers right up to `knows` + 2 digits from now on. A registered model never changes
        (the eval store remembers its answers: layout.ANSWERS); this one does, so what it answered is forgotten."""
        monkeypatch.setattr(KnowsUpTo, "knows", knows)
        for key in eval_store.list(f"{layout.ANSWERS}/{registry.model_name}"):
            eval_store.delete(key)

    promote()
    learn(8)  # greedy answers right up to 10 digits: 3 tiers past 10 belong in it
    meta, manifest = suite()
    assert meta["tiers"] == "add 1-13, sub 1-13" and meta["grown_version"] == "0001"
    assert meta["champion add/10"] == 1.0 and meta["tiers_sealed_now"] == "add 13, sub 13"
    assert {(s["skill"], s["tier"], s["items"], s["private"]) for s in manifest["slices"] if s["tier"] == 13} == {
        ("add", 13, 20, True), ("sub", 13, 20, True)}
    refreshed = eval_store.read_json(layout.refreshed(manifest["refreshed_version"]))["items"]
    assert {i["tier"] for i in refreshed} == set(range(1, 14))  # the fresh set covers every tier the suite holds
    first = eval_store.read_json(layout.grown("0001"))
    assert set(manifest["hashes"]) >= {recipe.prompt_hash(i["prompt"]) for i in first["items"]}  # sealed as any

    assert suite()[0]["grown_version"] == "0001"  # the same champion again: tier 13 is still 3 past its best
    learn(11)
    # a champion the gate kept, that solves the top tier, 13, in a later cycle: followed three more (a rejected
    # candidate does not freeze the suite, or nothing would be left to practise or label)
    meta, manifest = suite()
    assert meta["tiers"] == "add 1-16, sub 1-16" and meta["grown_version"] == "0002"
    promote()  # a new champion as strong: the suite holds 3 tiers past its best already
    meta, manifest = suite()
    assert meta["tiers"] == "add 1-16, sub 1-16" and meta["grown_version"] == "0002"
    second = eval_store.read_json(layout.grown("0002"))
    assert second["grew_from"] == "0001" and second["items"][:len(first["items"])] == first["items"]
    assert eval_store.read_json(layout.grown("0001")) == first  # an old version stays as it was, readable
    learn(18)  # a champion that climbed far in one cycle: right up to 20 digits
    promote()
    meta = suite()[0]  # the next tiers are tried one at a time while it solves them, at most 6 a cycle
    assert meta["tiers"] == "add 1-22, sub 1-22" and meta["champion add/20"] == 1.0 > meta["champion add/21"]
    anchor_tiers = {i["tier"] for i in eval_store.read_json(layout.ANCHOR)["items"]}
    assert anchor_tiers == set(range(1, 13))  # the frozen anchor keeps its tiers: the learning curve compares


def test_a_champion_that_generalizes_past_the_suite_s_growth_gets_a_horizon_slice_it_still_fails(
        rmi_env, monkeypatch):
    from rmi_pipeline.ml.curriculum import FAR, FEWEST, HEADROOM, HORIZON, measured_at, problems_at, reach
    from rmi_pipeline.ml.gate import Paired, decide

    monkeypatch.setenv("RMI_RECIPE", "knowing_recipe:KnowsUpTo")
    monkeypatch.setenv("RMI_EVAL_ITEMS_PER_SLICE", "40")
    monkeypatch.setenv("RMI_EVAL_REFRESHED_ITEMS_PER_SLICE", "10")
    resources = build_resources(Settings())
    registry, eval_store, storage = resources["registry"], resources["eval_store"], resources["storage"]
    recipe = KnowsUpTo()
    curate_eval_suite(eval_store, recipe, 40, seed=0)
    # right up to 10 digits, then less and less often: about half right at 30 digits, none from 50
    monkeypatch.setattr(KnowsUpTo, "knows", 8)
    monkeypatch.setattr(KnowsUpTo, "fades_over", 40)

    def promoted_and_suite() -> tuple[dict, dict]:
        torch.manual_seed(0)
        with registry.run("champion", tags={}) as run_id:
            version = registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)),
                                              "knowing_recipe:KnowsUpTo", tags={}).version
        registry.promote(version, {"promoted_by": "test"})
        with instance_for_test() as instance:
            result = materialize([eval_suite], instance=instance, resources=resources)
        meta = {k: v.value for k, v in result.asset_materializations_for_node("eval_suite")[0].metadata.items()}
        return meta, storage.read_json(layout.EVAL_MANIFEST)

    def horizon_slices(manifest: dict) -> dict[str, list[dict]]:
        return {s: [x for x in manifest["slices"] if x["skill"] == s and x["horizon"] and not x["edge"]]
                for s in recipe.skills}

    meta, manifest = promoted_and_suite()
    first = horizon_slices(manifest)
    dense_top = reach(recipe, manifest["slices"])  # practice stops at the dense tiers, not at the horizon
    for skill in recipe.skills:
        near, far = first[skill]  # the first tier it answers under HORIZON, and 4 times as many digits
        assert near["tier"] > dense_top[skill] + 10 and far["tier"] == FAR * near["tier"] and near["private"]
        assert near["items"] == measured_at(40, near["tier"]) == FEWEST  # fewer past 10 digits, never few
        assert far["items"] == problems_at(40, far["tier"]) < FEWEST  # fewer still: both models fail it
        assert meta[f"champion {skill}/{near['tier']}"] < HORIZON <= meta[f"champion {skill}/{dense_top[skill]}"]
        assert meta[f"champion {skill}/{far['tier']}"] == 0
    assert meta["horizon_slices"] == ", ".join(f"{x['skill']}/{x['tier']}" for s in recipe.skills for x in first[s])
    assert meta["tiers"].startswith(f"add 1-{dense_top['add']}, {first['add'][0]['tier']}, {first['add'][1]['tier']}")
    refreshed = eval_store.read_json(layout.refreshed(manifest["refreshed_version"]))["items"]
    near = first["add"][0]["tier"]
    assert sum(i["tier"] == near and i["skill"] == "add" for i in refreshed) == measured_at(10, near) == 10

    meta, manifest = promoted_and_suite()  # as strong again: it still fails the horizon, no new one is sealed
    assert horizon_slices(manifest) == first
    dense_top = reach(recipe, manifest["slices"])  # a tier near 0.9 may have been sealed on this draw

    monkeypatch.setattr(KnowsUpTo, "knows", 30)  # it climbed past the near horizon, not the far one: a near one
    meta, manifest = promoted_and_suite()     # again between them, where its next gain shows
    between = horizon_slices(manifest)
    for skill in recipe.skills:
        (near, far), (_, middle, _) = first[skill], between[skill]
        assert between[skill] == [near, middle, far] and near["tier"] < middle["tier"] < far["tier"]
        assert meta[f"champion {skill}/{middle['tier']}"] < HORIZON <= meta[f"champion {skill}/{near['tier']}"]
        assert meta[f"champion {skill}/{far['tier']}"] < HEADROOM
    assert reach(recipe, manifest["slices"]) == {s: dense_top[s] + 6 for s in recipe.skills}  # at most 6 a cycle
    # and where it is still sure, past the dense tiers and short of the near slice, an edge slice big enough that
    # a candidate which lost that reach is turned down (it solves the dense tiers and every slice but this one)
    grown = eval_store.read_json(layout.grown(meta["grown_version"]))["items"]
    for skill in recipe.skills:
        (edge,) = [x for x in manifest["slices"] if x["skill"] == skill and x["edge"]]
        assert dense_top[skill] + 6 < edge["tier"] < first[skill][0]["tier"] and edge["items"] == FEWEST
        assert meta[f"champion {skill}/{edge['tier']}"] >= 0.8
        items = [i for i in grown if i["skill"] == skill and i["tier"] == edge["tier"]]
        sure = recipe.correct(None, [Task(i["prompt"], i["answer"], skill, i["tier"]) for i in items])
        monkeypatch.setattr(KnowsUpTo, "knows", edge["tier"] - 30)
        lost = recipe.correct(None, [Task(i["prompt"], i["answer"], skill, i["tier"]) for i in items])
        monkeypatch.setattr(KnowsUpTo, "knows", 30)
        verdict = decide({"edge": Paired(np.array(lost, dtype=float), np.array(sure, dtype=float))}, {"edge"},
                         Settings().gate)
        assert not verdict.promote and verdict.slices[0].regressed, verdict.reason
    meta, manifest = promoted_and_suite()  # as strong again: it fails the new one, nothing more is sealed
    assert horizon_slices(manifest) == between

    monkeypatch.setattr(KnowsUpTo, "knows", 400)  # and past the far one: two more, the old ones stay
    meta, manifest = promoted_and_suite()
    for skill in recipe.skills:
        *old, near, far = horizon_slices(manifest)[skill]
        assert old == between[skill] and near["tier"] > first[skill][1]["tier"]
        assert far["tier"] == min(FAR * near["tier"], recipe.hardest_tier)
        assert meta[f"champion {skill}/{near['tier']}"] < HORIZON


def _grown(recipe, monkeypatch, within: float) -> tuple[list, dict, dict, int]:
    """suite_growth over a 12-tier suite of 40 items a slice, its searches halving to within `within`: (new items,
    tiers added, scores, problems the champion answered)."""
    import random

    from rmi_pipeline.ml import curriculum

    monkeypatch.setattr(curriculum, "SEARCH_WITHIN", within)
    suite = [vars(t) for t in recipe.build_eval_suite(random.Random(0), 40)]
    asked = []

    def correct(tasks):
        asked.append(len(tasks))
        return recipe.correct(None, tasks)

    new, added, scores = curriculum.suite_growth(recipe, correct, suite, 0.9, 3, random.Random("grow"), 40)
    return new, added, scores, sum(asked)


def test_the_suite_s_searches_seal_what_they_did_to_the_digit_within_50_tiers_and_stay_near_the_reach_past_them(
        monkeypatch):
    from rmi_pipeline.ml.curriculum import HORIZON, SEARCH_WITHIN

    recipe = KnowsUpTo()
    # within 50 tiers (make run's reaches) the same slices, problems and champion scores: the same eval_headroom
    # and gate decisions on the same seeds
    for knows, fades_over in ((8, 40), (20, 20), (30, 12)):
        monkeypatch.setattr(KnowsUpTo, "knows", knows)
        monkeypatch.setattr(KnowsUpTo, "fades_over", fades_over)
        digit, now = _grown(recipe, monkeypatch, 0.0), _grown(recipe, monkeypatch, SEARCH_WITHIN)
        assert now == digit and any(i.get("horizon") for i in now[0]), (knows, now[1])
    # far past them, a search stops within SEARCH_WITHIN of the tier where the champion starts failing, in fewer
    # problems than to the digit
    monkeypatch.setattr(KnowsUpTo, "knows", 400)
    monkeypatch.setattr(KnowsUpTo, "fades_over", 60)
    (_, added_digit, scores_digit, asked_digit), (_, added, scores, asked) = (
        _grown(recipe, monkeypatch, 0.0), _grown(recipe, monkeypatch, SEARCH_WITHIN))

    def near(added: dict, scores: dict, skill: str) -> int:  # the horizon slice: the first sealed tier it fails
        return min(t for t in added[skill] if scores.get(f"{skill}/{t}", 1.0) < HORIZON)

    for skill in recipe.skills:
        tier = near(added, scores, skill)
        held = max(t for name, score in scores.items()
                   if name.startswith(f"{skill}/") and (t := int(name.split("/")[1])) < tier and score >= HORIZON)
        assert tier - held <= SEARCH_WITHIN * held and held > 300
        assert abs(tier - near(added_digit, scores_digit, skill)) <= 2 * SEARCH_WITHIN * tier
    assert asked < 0.9 * asked_digit
