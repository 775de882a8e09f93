"""What the assets call, on fixed tables: the training mix, per-slice scores, retry prompts, checkpoints."""

import io
import pickle

import numpy as np
import polars as pl
import pytest
import torch

from rmi_pipeline.ml.hygiene import is_mined_holdout
from rmi_pipeline.ml.mix import EARLIER_PRACTICE, in_mix, mix_sources, weights
from rmi_pipeline.ml.practice import retry_prompts
from rmi_pipeline.ml.scored import Scored, eval_tasks, top_tier
from rmi_pipeline.ml.seeding import turn_seed
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe

R = ArithmeticRecipe()


def test_each_row_gets_its_source_in_the_mix_and_each_source_its_share_of_every_batch():
    rows = pl.DataFrame({
        "source": ["thumbs_up", "correction", "thumbs_up", "correction", "seed", EARLIER_PRACTICE, "practice", "rl"],
        "batch_id": ["new", "new", "old", "old", None, None, None, None],
    })
    mixed = mix_sources(rows, ["new"])
    assert mixed["mix"].to_list() == ["feedback", "corrections", "replay", "replay", "replay", "replay", "practice",
                                      "rl"]
    shares = {"feedback": 0.2, "corrections": 0.2, "replay": 0.4, "practice": 0.2, "rl": 0.0}
    kept = mixed.filter(in_mix(shares))
    sizes = dict(kept.group_by("mix").len().iter_rows())
    assert sizes == {"feedback": 1, "corrections": 1, "replay": 4, "practice": 1}  # rl has no share: no rows
    weighted = kept.with_columns(weight=pl.col("mix").replace_strict(weights(sizes, shares)))
    total = weighted.group_by("mix").agg(pl.col("weight").sum())
    assert dict(total.iter_rows()) == pytest.approx({"feedback": 0.2, "corrections": 0.2, "replay": 0.4,
                                                     "practice": 0.2})
    with pytest.raises(ValueError, match="leaves no rows"):
        weights({}, {"self_label": 1.0, "feedback": 0.0})  # no row of a source with a share


def test_slices_pool_anchor_and_refreshed_and_the_leak_pairs_compare_seen_with_unseen():
    item = lambda p, a, s, t: {"prompt": p, "answer": a, "skill": s, "tier": t}  # noqa: E731
    tasks = eval_tasks({
        "anchor": [item("1+1=", "2", "add", 1), item("9-1=", "8", "sub", 1)],
        "refreshed": [item("2+1=", "3", "add", 1)],
        "mined": [item("5+5=", "10", "add", 1)],
        "public": [item("3+3=", "6", "add", 1)],
    })
    challenger, champion = np.array([1, 0, 1, 1, 1.0]), np.array([0, 0, 1, 0, 0.0])
    scored = Scored(tasks, [challenger, champion])
    slices = scored.slices()
    assert list(slices) == ["add/1", "sub/1", "mined/add"]
    assert slices["add/1"].challenger.tolist() == [1, 1] and slices["add/1"].champion.tolist() == [0, 1]
    leaks = scored.leak_pairs({("add", 1)})
    seen, unseen = leaks["anchor"]
    assert seen.challenger.tolist() == [1] and unseen.challenger.tolist() == [1]  # anchor add/1 vs refreshed add/1
    assert leaks["public"][0].champion.tolist() == [0]
    assert scored.anchor_mean(0, {("add", 1), ("sub", 1)}) == 0.5
    assert scored.anchor_mean(1, {("add", 1), ("sub", 1)}, skill="add") == 0.0
    alone = Scored(tasks, [challenger]).slices()["sub/1"]
    assert alone.champion is None and alone.challenger.tolist() == [0]


def test_retry_prompts_are_distinct_askable_newest_first_and_never_held_out_eval_items():
    prompts = [f"{a}+{a}=" for a in range(200)]
    held_out = [p for p in prompts if is_mined_holdout(R.prompt_hash(p), 0.2)]
    assert held_out  # the split holds some of them out
    newest = next(p for p in reversed(prompts) if p not in held_out)
    down = ["not arithmetic", newest, newest, *prompts]  # the warehouse's order: newest first
    retried = retry_prompts(R, down, 0.2, limit=50)
    assert len(retried) == 50 and len(set(retried)) == 50 and "not arithmetic" not in retried
    assert not set(retried) & set(held_out)
    assert retried[0] == newest and retried[1:] == [p for p in prompts if p not in held_out and p != newest][:49]


def test_a_retry_after_a_turned_down_candidate_gets_a_new_seed_and_the_same_turn_the_same_one():
    assert turn_seed(0, "3", 0) == turn_seed(0, 3, 0) != turn_seed(0, "3", 1)
    assert turn_seed(1, "3", 0) != turn_seed(0, "3", 0)


def test_a_checkpoint_rebuilds_the_same_model_and_never_unpickles_code():
    torch.manual_seed(0)
    module = R.build_model(3e-3, 10, size="tiny")
    again = R.load_checkpoint(R.checkpoint(module))
    assert R.model_config(again) == R.model_config(module)
    assert all(torch.equal(a, b) for a, b in zip(module.state_dict().values(), again.state_dict().values(),
                                                 strict=True))

    class Payload:
        def __reduce__(self):
            return (print, ("code ran",))

    buffer = io.BytesIO()
    torch.save({"config": R.model_config(module), "state_dict": module.state_dict(), "x": Payload()}, buffer)
    with pytest.raises(pickle.UnpicklingError):
        R.load_checkpoint(buffer.getvalue())


def test_grown_tiers_are_counted_slices_but_stay_out_of_the_anchor_mean_and_the_leak_pairs():
    item = lambda p, a, t: {"prompt": p, "answer": a, "skill": "add", "tier": t}  # noqa: E731
    tasks = eval_tasks({
        "anchor": [item("1+1=", "2", 1), item("10+10=", "20", 2)],
        "grown": [item("100+100=", "200", 3), item("1000+1000=", "2000", 4)],
        "refreshed": [item("2+2=", "4", 1), item("300+300=", "600", 3), item("4000+4000=", "8000", 4)],
    })
    scored = Scored(tasks, [np.array([1, 1, 1, 0, 1, 1, 1.0]), np.array([1, 0, 0, 0, 1, 0, 0.0])])
    slices = scored.slices()
    assert list(slices) == ["add/1", "add/2", "add/3", "add/4"]
    assert slices["add/3"].challenger.tolist() == [1, 1] and slices["add/4"].challenger.tolist() == [0, 1]
    everything = {("add", t) for t in (1, 2, 3, 4)}
    assert scored.anchor_mean(0, everything) == 1.0 and scored.anchor_mean(1, everything) == 0.5  # tiers 1-2 only
    seen, unseen = scored.leak_pairs(everything)["anchor"]
    assert len(seen.challenger) == 2 and len(unseen.challenger) == 1  # refreshed add/1; not the grown tiers
    assert top_tier(slices, "add", 0, 0.9) == 3 and top_tier(slices, "add", 1, 0.9) == 1  # every tier up to it
    far = {**slices, "add/9": slices["add/1"]}  # a horizon slice solved past unmeasured tiers does not count
    assert top_tier({k: v for k, v in far.items() if k != "add/4"}, "add", 0, 0.9) == 3


def test_a_step_holds_a_full_batch_of_short_rows_and_fewer_long_ones_within_the_same_tokens():
    """A curriculum that reached 187-digit sums made every batch of them cost 20 feedback batches: a step's rows
    are bounded by tokens, so its cost stays flat however far the frontier climbed."""
    from rmi_pipeline.ml.train import BUCKET_TOKENS, ROW_TOKENS, _LengthBatches, rank_sampler

    lengths = torch.tensor([12] * 900 + [570] * 100)  # users' questions, and long practice sums
    sampler = _LengthBatches(torch.ones(1000), lengths, steps=200, batch=64, seed=0, rank=0)
    batches = list(sampler)
    assert len(batches) == 200 == len(sampler)
    padded = [len(b) * BUCKET_TOKENS * int(max((lengths[b] - 1) // BUCKET_TOKENS) + 1) for b in batches]
    assert max(padded) <= 64 * ROW_TOKENS
    is_long = [bool(max(lengths[b]) == 570) for b in batches]
    short = [b for b, lg in zip(batches, is_long, strict=True) if not lg]
    long = [b for b, lg in zip(batches, is_long, strict=True) if lg]
    # 64 short rows a step, 7 long ones (570 tokens: 18 buckets); only a pool's last of each kind may hold fewer
    full = [64 * ROW_TOKENS // 576 if lg else 64 for lg in is_long]
    assert short and long and all(len(b) == n or i + 1 == len(batches) or is_long[i + 1] != is_long[i]
                                  for i, (b, n) in enumerate(zip(batches, full, strict=True)))
    assert full[is_long.index(True)] == 7
    drawn_long = sum(int((lengths[b] == 570).sum()) for b in batches) / sum(len(b) for b in batches)
    assert 0.05 < drawn_long < 0.15, "rows are still drawn by weight: about a tenth are long"
    # rows of one bucket, no longer than ROW_TOKENS, train exactly as before the bound: full batches as drawn
    drawn = list(rank_sampler(torch.ones(900), 20 * 64, 0, 0))
    assert list(_LengthBatches(torch.ones(900), lengths[:900], 20, 64, 0, 0)) == [
        drawn[i:i + 64] for i in range(0, len(drawn), 64)]


def test_no_training_step_applies_a_gradient_larger_than_the_clip():
    """A climb's candidate, warm-started and trained on right labels, lost subtraction (3-digit differences 1.00 ->
    0.95); trained again on the same rows, with the clip it answered 240-digit sums 1.00 on two seeds, against 0.85
    and 0.65 without (bench/retrain.py)."""
    import random

    from rmi_pipeline.ml.train import fit
    from rmi_pipeline.settings import Training

    seed_set = R.seed_tasks(random.Random(0))[:256]
    applied = {}
    for clip in (1.0, 0.0):
        model = R.build_model(3e-3, 20)
        tokens, mask = R.encode(model, [t.prompt for t in seed_set], [t.answer for t in seed_set])
        configure, norms = model.configure_optimizers, applied.setdefault(clip, [])

        def recording(configure=configure, norms=norms):
            config = configure()
            config["optimizer"].register_step_post_hook(lambda opt, *_: norms.append(float(torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for g in opt.param_groups for p in g["params"] if p.grad is not None])))))
            return config

        model.configure_optimizers = recording
        fit(model, tokens, mask, max_steps=20, max_seconds=120, scales=torch.full((len(tokens),), 50.0),
            trainer=Training(gradient_clip=clip, accelerator="cpu").trainer_options())
    assert len(applied[1.0]) == 20 and max(applied[1.0]) <= 1.0 + 1e-4
    assert max(applied[0.0]) > 1.0, "unclipped, these rows' gradients are larger: else nothing here was clipped"
