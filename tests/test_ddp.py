"""Distributed training for real: an improvement cycle's candidate trained by 2 CPU processes (DDP over gloo),
launched through Dagster Pipes, against the same cycle trained by one process.

The one-process side is the shared loop's own cycle 1 (tests/conftest.py `loop_home`): its challenger v2 was
trained from v1 on the cycle's dataset. Here the same dataset, warm start, seed, steps and rows per step go to a
DDP run in a fresh home, and both candidates answer the loop's sealed anchor problems, which no training row
can contain.
"""


import numpy as np
import torch
from dagster import instance_for_test, materialize

from rmi_pipeline.assets import candidate_model
from rmi_pipeline.ml.train import rank_sampler
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.recipes.base import Task
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.settings import DEFAULT_RECIPE as RECIPE_PATH
from rmi_pipeline.settings import Settings


def test_each_process_draws_its_own_seeded_share_of_the_rows():
    weights = torch.rand(500).double()
    draws = {rank: list(rank_sampler(weights, 256, seed=3, rank=rank)) for rank in (0, 1)}
    assert draws[0] != draws[1]
    assert draws[1] == list(rank_sampler(weights, 256, seed=3, rank=1))  # seeded: the same candidate again
    assert list(rank_sampler(weights, 256, seed=4, rank=0)) != draws[0]


def test_a_dataset_past_torch_multinomial_s_2_24_rows_is_drawn_by_weight():
    """A 100M-event history makes more training rows than torch.multinomial takes (2^24): they are drawn by weight
    all the same, never a row of weight 0."""
    n = 2**24 + 1000
    weights = torch.zeros(n, dtype=torch.float64)
    weights[[10, n - 500, n - 1]] = torch.tensor([1.0, 3.0, 0.0], dtype=torch.float64)
    weights[2000:2100] = 0.01  # a source of many rows with a small share: 1.0 in all
    drawn = torch.tensor(list(rank_sampler(weights, 50_000, seed=3, rank=0)))
    assert set(drawn.unique().tolist()) <= {10, n - 500, *range(2000, 2100)}
    share = lambda rows: float(rows.sum()) / len(drawn)  # noqa: E731
    assert abs(share(drawn == 10) - 0.2) < 0.01 and abs(share(drawn == n - 500) - 0.6) < 0.01
    assert abs(share((drawn >= 2000) & (drawn < 2100)) - 0.2) < 0.01
    assert list(rank_sampler(weights, 100, seed=3, rank=1)) != list(rank_sampler(weights, 100, seed=3, rank=0))


def exact_match(recipe, module, tasks) -> np.ndarray:
    return np.array(recipe.correct(module.eval(), tasks), dtype=float)


def test_two_processes_train_a_cycle_as_well_as_one_and_only_rank_zero_registers(loop_home, rmi_env, monkeypatch):
    recipe = ArithmeticRecipe()
    loop = build_resources(Settings(home=loop_home["home"]))
    one = loop["registry"].client().get_model_version(rmi_env.model_name, "2")  # cycle 1, one process
    assert one.tags["warm_start_from"] == "1"
    one_run = loop["registry"].client().get_run(one.run_id).data
    steps = int(one_run.params["steps"])
    assert one_run.metrics["steps_done"] == steps, "the loop's cycle 1 was cut short by its time cap"

    for key, value in {"RMI_TRAIN_STEPS": steps, "RMI_TRAIN_MAX_SECONDS": 1800, "RMI_TRAIN_ACCELERATOR": "cpu",
                       "RMI_TRAIN_STRATEGY": "ddp", "RMI_TRAIN_DEVICES": 2}.items():
        monkeypatch.setenv(key, str(value))
    settings = Settings()
    here = build_resources(settings)
    with here["registry"].run("loop champion v1", tags={}) as run_id:  # the loop's first champion, this home's
        here["registry"].register_model(run_id, loop["registry"].checkpoint("1")[1], RECIPE_PATH, tags={})
    here["registry"].promote("1", tags={})
    dataset = one.tags["dataset_version"]
    for key in (layout.dataset_rows(dataset), layout.dataset_manifest(dataset)):
        here["storage"].write_bytes(key, loop["storage"].read_bytes(key))
    here["storage"].write_json(layout.DATASET_LATEST, {"version": dataset})

    with instance_for_test() as instance:
        result = materialize([candidate_model], instance=instance, resources=here)
    assert result.success
    meta = {k: v.value for k, v in result.asset_materializations_for_node("candidate_model")[0].metadata.items()}
    assert meta["world_size"] == 2 and meta["steps_done"] == steps
    client = here["registry"].client()
    assert client.get_run(meta["mlflow_run_id"]).data.params["seed"] == one_run.params["seed"]

    # one candidate, one checkpoint, one model version: rank 1 trained but wrote and reported nothing
    assert sorted(str(v.version) for v in client.search_model_versions(f"name='{settings.model_name}'")) == ["1", "2"]
    assert str(here["registry"].version("challenger").version) == "2" == str(meta["model_version"])
    assert [a.path for a in client.list_artifacts(meta["mlflow_run_id"], "model/data/checkpoint")] == [
        "model/data/checkpoint/checkpoint.pt", "model/data/checkpoint/recipe.json"]
    assert len(here["storage"].list(layout.CANDIDATE_CHECKPOINTS)) == 1
    curve = client.get_metric_history(meta["mlflow_run_id"], "train_loss")
    assert [m.step for m in curve] == sorted({m.step for m in curve}) and curve[-1].step == steps
    assert curve[-1].value < curve[0].value  # it trained: the loss fell from the champion's

    anchor = [Task(**item) for item in loop["eval_store"].read_json(layout.ANCHOR)["items"]
              if recipe.is_private_slice(item["skill"], item["tier"], rmi_env.evals.items_per_slice)]
    start = exact_match(recipe, loop["registry"].load("1", recipe), anchor).mean()
    alone = exact_match(recipe, loop["registry"].load("2", recipe), anchor).mean()
    together = exact_match(recipe, here["registry"].load("challenger", recipe), anchor).mean()
    # Two processes draw the rows in another order than one, and at 1,000 steps the order alone moves the anchor mean
    # by several points (from the loop's 0.158: one process 0.392, two 0.416; seed 1, from 0.186: 0.547 and 0.592;
    # from an older, stronger 0.328: 0.743 and 0.692; from 0.143 on 2026-12-07: 0.495 and 0.405, 74% of the gain),
    # more than the problems' sampling noise a paired interval would allow: two processes must give most of one
    # process's gain, with room for that noise (a run that learned nothing, or half as fast, still fails).
    assert together - start >= 0.6 * (alone - start), (start, alone, together)
