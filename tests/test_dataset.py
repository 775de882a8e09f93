"""training_dataset: eval items never reach training, a canary blocks, and new feedback gets its share."""

import random

import pytest
from dagster import instance_for_test, materialize

from rmi_pipeline import layout
from rmi_pipeline.assets import eval_suite, training_dataset
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources
from rmi_pipeline.schema import event_frame, validate
from rmi_pipeline.world.curators import curate_eval_suite


def event(i: int, prompt: str, completion: str, rating="up", correction=None) -> dict:
    record, _ = validate({"event_id": f"e{i}", "ts": "2026-11-30T10:00:00Z", "user_id": "u", "model_version": "1",
                          "prompt": prompt, "completion": completion, "rating": rating, "correction": correction},
                         4096)
    return record | {"batch_id": "b1.jsonl"}


@pytest.fixture
def build(rmi_env):
    resources = build_resources(rmi_env)
    suite = curate_eval_suite(resources["storage"], ArithmeticRecipe(), 40, seed=0)

    def run(events: list[dict]):
        resources["warehouse"].ingest(event_frame(events))
        with instance_for_test() as instance:
            return materialize([eval_suite, training_dataset], instance=instance, resources=resources,
                               raise_on_error=False)

    return run, resources, suite


def test_eval_items_are_removed_and_counted_and_new_feedback_is_half_of_each_batch(build):
    run, resources, suite = build
    leaked = next(i for i in suite["items"] if i["tier"] == 4)
    a, b = leaked["prompt"][:-1].split("+") if "+" in leaked["prompt"] else (None, None)
    same_problem = f"{b}+{a}=" if a else leaked["prompt"]  # operand order does not hide an eval item
    rng = random.Random(5)
    fresh = [(f"{x}+{y}=", str(x + y)) for x, y in ((rng.randint(10**6, 10**7), rng.randint(10**6, 10**7))
                                                  for _ in range(50))]
    events = [event(i, p, c) for i, (p, c) in enumerate(fresh)]
    events += [event(100, same_problem, leaked["answer"]), event(101, "7+8=", "16", "down", correction="15"),
               event(102, "what is 2+2", "4"), event(103, "1+1=", "3", "down")]
    result = run(events)
    assert result.success
    meta = {k: v.value for k, v in result.asset_materializations_for_node("training_dataset")[0].metadata.items()}
    recipe = ArithmeticRecipe()
    private = {recipe.prompt_hash(i["prompt"]) for i in suite["items"] if i["tier"] > 1}
    seed_overlap = sum(recipe.prompt_hash(t.prompt) in private for t in recipe.seed_tasks(random.Random(0)))
    assert meta["removed_eval_overlap"] == seed_overlap + 1 and meta["unusable_rows"] == 1
    assert meta["rows_correction"] == 1 and meta["rows_thumbs_up"] == 50
    data = resources["storage"].read_parquet(f"{layout.DATASETS}/{meta['version']}/train.parquet")
    assert not any(recipe.prompt_hash(p) in private for p in data["prompt"])
    new = data.filter(data["batch_id"] == "b1.jsonl")
    assert abs(new["weight"].sum() - 0.5) < 1e-9 and abs(data["weight"].sum() - 1.0) < 1e-9


def test_a_canary_in_feedback_blocks_the_dataset(build):
    run, _, suite = build
    result = run([event(1, "12+30=", "42", "down", correction=f"42 {suite['canary']}")])
    assert not result.success
    checks = {e.asset_check_key.name: e for e in result.get_asset_check_evaluations()}
    assert not checks["no_canary"].passed and checks["no_canary"].metadata["rows_with_canary"].value == 1
