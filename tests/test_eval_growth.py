"""The eval suite grows ahead of the champion: the next tiers are sealed before the top ones saturate."""

import torch
from dagster import instance_for_test, materialize
from knowing_recipe import KnowsUpTo

from rmi_pipeline.assets import eval_suite
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.settings import Settings
from rmi_pipeline.world.curators import curate_eval_suite


def test_a_champion_that_solves_the_top_tiers_makes_the_suite_seal_the_next_ones(rmi_env, monkeypatch):
    monkeypatch.setenv("RMI_RECIPE", "knowing_recipe:KnowsUpTo")
    monkeypatch.setenv("RMI_EVAL_ITEMS_PER_SLICE", "20")
    monkeypatch.setenv("RMI_REFRESHED_ITEMS_PER_SLICE", "10")
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

    promote()
    monkeypatch.setattr(KnowsUpTo, "knows", 8)  # greedy answers right up to 10 digits: 3 tiers past 10 belong in it
    meta, manifest = suite()
    assert meta["tiers"] == "add 1-13, sub 1-13" and meta["grown_version"] == "0001"
    assert meta["champion add/10"] == 1.0 and meta["tiers_sealed_now"] == "add 13-13, sub 13-13"
    assert {(s["skill"], s["tier"], s["items"], s["private"]) for s in manifest["slices"] if s["tier"] == 13} == {
        ("add", 13, 20, True), ("sub", 13, 20, True)}
    refreshed = eval_store.read_json(layout.refreshed(manifest["refreshed_version"]))["items"]
    assert {i["tier"] for i in refreshed} == set(range(1, 14))  # the fresh set covers every tier the suite holds
    first = eval_store.read_json(layout.grown("0001"))
    assert set(manifest["hashes"]) >= {recipe.prompt_hash(i["prompt"]) for i in first["items"]}  # sealed as any

    assert suite()[0]["grown_version"] == "0001"  # the same champion again: tier 13 is still 3 past its best
    monkeypatch.setattr(KnowsUpTo, "knows", 11)
    assert suite()[0]["grown_version"] == "0001"  # a champion grows the suite once, however often the suite runs

    promote()  # a new champion that solves the top tier, 13: three more
    meta, manifest = suite()
    assert meta["tiers"] == "add 1-16, sub 1-16" and meta["grown_version"] == "0002"
    second = eval_store.read_json(layout.grown("0002"))
    assert second["grew_from"] == "0001" and second["items"][:len(first["items"])] == first["items"]
    assert eval_store.read_json(layout.grown("0001")) == first  # an old version stays as it was, readable
    monkeypatch.setattr(KnowsUpTo, "knows", 18)  # a champion that climbed far in one cycle: right up to 20 digits
    promote()
    meta = suite()[0]  # the next tiers are tried one at a time while it solves them, at most 6 a cycle
    assert meta["tiers"] == "add 1-22, sub 1-22" and meta["champion add/20"] == 1.0 > meta["champion add/21"]
    anchor_tiers = {i["tier"] for i in eval_store.read_json(layout.ANCHOR)["items"]}
    assert anchor_tiers == set(range(1, 13))  # the frozen anchor keeps its tiers: the learning curve compares
