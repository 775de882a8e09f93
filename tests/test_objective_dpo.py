"""DPO on preference pairs: our loss is TRL's (its own code, on the same batch); a few steps of it widen the gap
between a pair's preferred answer and the one it was preferred to, beyond what the warm-start model saw; and the
pairs come from feedback (a correction over the answer it corrects, a thumbs-up over a thumbs-down to the same
prompt) only when RMI_MIX gives them a share.
"""

import random
from collections import defaultdict
from types import SimpleNamespace

import polars as pl
import pytest
import torch
from test_objective_kto import _pairs, _TinyLM

from rmi_pipeline.ml.objective import completion_log_probs, dpo_loss, dpo_reference, sequence_log_probs
from rmi_pipeline.ml.train import fit
from rmi_pipeline.recipes.base import load_recipe
from rmi_pipeline.settings import DEFAULT_RECIPE, Training


def _trl_dpo_loss(model, batch: dict, beta: float):
    """TRL's own DPO loss (DPOTrainer._compute_loss, loss_type "sigmoid", reference log-probs precomputed) on
    `batch`, called unbound with the few attributes it reads: a trainer needs a real model, tokenizer and dataset."""
    from dataclasses import MISSING, fields

    from trl import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer

    # DPOConfig's defaults, read without building one (its TrainingArguments check the machine for bf16)
    defaults = SimpleNamespace(**{f.name: f.default if f.default_factory is MISSING else f.default_factory()
                                  for f in fields(DPOConfig) if f.default is not MISSING or f.default_factory
                                  is not MISSING})
    assert defaults.loss_type == ["sigmoid"] and defaults.label_smoothing == 0 and defaults.ld_alpha is None
    trainer = SimpleNamespace(
        model=model, beta=beta, loss_types=defaults.loss_type, loss_weights=[1.0], ld_alpha=defaults.ld_alpha,
        f_divergence_type=defaults.f_divergence_type, label_smoothing=defaults.label_smoothing,
        use_weighting=defaults.use_weighting, precompute_ref_logps=True, aux_loss_enabled=False,
        accelerator=SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x, gather=lambda x: x),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0, _tp_size=1)
    return DPOTrainer._compute_loss(trainer, model, batch, return_outputs=False)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_our_dpo_loss_and_its_gradient_are_trl_s_on_the_same_batch(seed):
    import trl

    generator = torch.Generator().manual_seed(seed)
    rows, vocab, width, beta = 12, 11, 14, 0.1
    chosen, chosen_attention, chosen_completion = _pairs(generator, rows, vocab, width)
    rejected, rejected_attention, rejected_completion = _pairs(generator, rows, vocab, width)
    reference_chosen = torch.randn(rows, generator=generator) * 3 - 20
    reference_rejected = torch.randn(rows, generator=generator) * 3 - 20

    model = _TinyLM(vocab)
    torch.manual_seed(seed)
    torch.nn.init.normal_(model.table.weight, std=2.0)
    trl_loss = _trl_dpo_loss(model, {  # TRL's batch: the chosen rows, then the rejected ones
        "input_ids": torch.cat([chosen, rejected]), "attention_mask": torch.cat([chosen_attention, rejected_attention]),
        "completion_mask": torch.cat([chosen_completion, rejected_completion]),
        "ref_chosen_logps": reference_chosen, "ref_rejected_logps": reference_rejected}, beta)
    (trl_grad,) = torch.autograd.grad(trl_loss, model.table.weight)

    ours = dpo_loss(sequence_log_probs(model(chosen), chosen, chosen_completion),
                    sequence_log_probs(model(rejected), rejected, rejected_completion),
                    reference_chosen, reference_rejected, beta).mean()
    (our_grad,) = torch.autograd.grad(ours, model.table.weight)

    print(f"trl {trl.__version__} seed {seed}: loss {float(trl_loss):.6f} ours {float(ours):.6f} "
          f"|diff| {abs(float(trl_loss - ours)):.2e}, gradient {float((trl_grad - our_grad).abs().max()):.2e}")
    assert abs(float(trl_loss - ours)) < 1e-5
    assert torch.allclose(trl_grad, our_grad, atol=1e-5)


def test_a_pair_where_the_model_is_the_reference_loses_log_2_and_less_as_its_margin_grows():
    reference = torch.tensor([-5.0, -5.0, -5.0]), torch.tensor([-7.0, -7.0, -7.0])
    losses = dpo_loss(torch.tensor([-5.0, -4.0, -6.0]), torch.tensor([-7.0, -8.0, -6.0]), *reference, beta=0.5)
    # margins over the reference's: 0, +2, -2
    assert torch.allclose(losses, torch.tensor([0.6931472, 0.3132617, 1.3132617]))


def _answer_pairs(rows: int = 32):
    """Arithmetic prompts with their right answer (chosen) and a wrong one of as many digits (rejected)."""
    tasks = [t for t in load_recipe(DEFAULT_RECIPE).seed_tasks(random.Random(0)) if t.tier in (2, 3)][:rows]
    rng = random.Random(1)
    wrong = [str((int(t.answer) + rng.randrange(1, 9 * 10 ** (len(t.answer) - 1))) % 10 ** len(t.answer)).zfill(
        len(t.answer)) for t in tasks]
    return [t.prompt for t in tasks], [t.answer for t in tasks], wrong, [t.tier for t in tasks]


def _margin(recipe, model, prompts, chosen, rejected) -> torch.Tensor:
    return (completion_log_probs(model, *recipe.encode(model, prompts, chosen))
            - completion_log_probs(model, *recipe.encode(model, prompts, rejected)))


def test_a_few_dpo_steps_raise_the_margin_of_the_chosen_answer_over_the_reference_s():
    recipe = load_recipe(DEFAULT_RECIPE)
    torch.manual_seed(0)
    module = recipe.build_model(3e-3, 30)
    prompts, chosen, rejected, _ = _answer_pairs()
    before = _margin(recipe, module, prompts, chosen, rejected)
    dpo_rows = dpo_reference(recipe, module, prompts, chosen, [*rejected[:-1], None], beta=0.1)
    assert dpo_rows.tolist() == [*range(len(prompts) - 1), -1]  # the last row is no pair
    assert torch.allclose(module.dpo.chosen_logps - module.dpo.rejected_logps, before[:-1])

    tokens, mask = recipe.encode(module, prompts, chosen)
    fit(module, tokens, mask, max_steps=30, max_seconds=60, batch_size=16, trainer={"accelerator": "cpu"},
        scales=torch.zeros(len(prompts)), dpo_rows=dpo_rows)  # the DPO loss alone trains
    gain = (_margin(recipe, module, prompts, chosen, rejected) - before)[:-1]
    print(f"margin over the reference's: mean {gain.mean():+.3f}, raised for {(gain > 0).float().mean():.0%}")
    assert gain.mean() > 1.0 and (gain > 0).float().mean() > 0.8


def test_the_training_program_trains_pairs_by_dpo_against_the_warm_start(tmp_path):
    from rmi_pipeline.training.program import train

    recipe = load_recipe(DEFAULT_RECIPE)
    torch.manual_seed(0)
    warm = recipe.build_model(3e-3, 30)
    (tmp_path / "warm.ckpt").write_bytes(recipe.checkpoint(warm))
    prompts, chosen, rejected, tiers = _answer_pairs()
    rows = pl.DataFrame({"prompt": prompts, "target": chosen, "mix": "pairs", "scale": 1.0, "reference": None,
                         "teacher": None, "rejected": rejected, "skill": "add", "tier": tiers},
                        schema_overrides={"reference": pl.String, "teacher": pl.String})
    rows.write_parquet(tmp_path / "train.parquet")
    metrics = train({
        "recipe": DEFAULT_RECIPE, "dataset_uri": str(tmp_path / "train.parquet"), "storage_options": {},
        "warm_start_uri": str(tmp_path / "warm.ckpt"), "checkpoint_uri": str(tmp_path / "candidate.ckpt"),
        "mix_weights": {"pairs": 1 / 32}, "model_size": "tiny", "steps": 30, "max_seconds": 60, "seed": 0,
        "batch_size": 16, "learning_rate": 3e-3, "dpo_beta": 0.1,
        "trainer": {**Training().hardware(), "accelerator": "cpu"}})
    assert metrics["rows_pairs"] == 32 and metrics["steps_done"] == 30

    candidate = recipe.load_checkpoint((tmp_path / "candidate.ckpt").read_bytes())
    gain = _margin(recipe, candidate, prompts, chosen, rejected) - _margin(recipe, warm, prompts, chosen, rejected)
    print(f"margin over the warm start's: mean {gain.mean():+.3f}")
    assert gain.mean() > 1.0 and (gain > 0).float().mean() > 0.8


class _Warehouse:
    """The two reads the dataset asset makes of the warehouse, over one DuckDB connection."""

    def __init__(self, db):
        self.db = db

    def query(self, sql: str):
        return self.db.sql(sql).pl()

    def stream(self, sql: str):
        yield self.db.sql(sql).pl()


def test_pairs_come_from_corrections_and_from_thumbs_on_the_same_prompt_only_when_they_train():
    import duckdb

    from rmi_pipeline.assets.dataset import _pairs
    from rmi_pipeline.ml.mix import in_mix, mix_sources
    from rmi_pipeline.settings import DEFAULT_MIX

    db = duckdb.connect()
    db.sql("CREATE TABLE feedback_events AS SELECT event_id, prompt, completion, rating, correction, batch_id, "
           "TIMESTAMP '2026-01-01' + to_seconds(event_id) AS ts, NULL::JSON AS meta FROM (VALUES "
           "(1, '3+3=', '7', 'down', '6', 'b1'), "  # a correction: 6 over 7
           "(2, '12+7=', '19', 'up', NULL, 'b0'), "
           "(3, '7+12=', '18', 'down', NULL, 'b1'), "  # the same canonical prompt: 19 over 18, new in b1
           "(4, '2+2=', '5', 'down', NULL, 'b0'), "
           "(5, '2+2=', '4', 'up', NULL, 'b0'), "  # learned before: dropped
           "(6, '5+5=', '11', 'down', NULL, 'b1'), "  # no thumbs-up answer: no pair
           "(7, '8+1=', '9', 'up', NULL, 'b1'), (8, '8+1=', '9', 'down', NULL, 'b1')"  # the same answer: no pair
           ") AS t(event_id, prompt, completion, rating, correction, batch_id)")
    assert DEFAULT_MIX["pairs"] == 0  # off until a bench chooses: the loop reads what it read before
    recipe = load_recipe(DEFAULT_RECIPE)
    rows = pl.concat(_pairs(recipe, _Warehouse(db)), how="diagonal")
    assert sorted(rows.select("prompt", "target", "rejected", "batch_id").rows()) == [
        ("2+2=", "4", "5", "b0"), ("3+3=", "6", "7", "b1"), ("7+12=", "19", "18", "b1")]
    mixed = mix_sources(rows, new_batches=["b1"]).filter(in_mix({**DEFAULT_MIX, "pairs": 0.1}))
    assert sorted(mixed.select("target", "rejected", "mix").rows()) == [("19", "18", "pairs"), ("6", "7", "pairs")]
    assert mix_sources(rows, new_batches=["b1"]).filter(in_mix(DEFAULT_MIX)).is_empty()


def test_a_pair_s_rejected_answer_is_written_beside_it_and_other_sources_rows_have_none(tmp_path):
    from rmi_pipeline.ml import dataset
    from rmi_pipeline.settings import DEFAULT_MIX

    evals = {"hashes": [], "leak_marker": "<<leak>>", "mined_share": 0.0}
    plain = pl.DataFrame({"prompt": ["1+1="], "target": ["2"], "batch_id": ["b1"], "source": ["thumbs_up"],
                          "scale": [1.0], "reference": [None], "teacher": [None]},
                         schema_overrides={"reference": pl.String, "teacher": pl.String})  # no rejected column
    pairs = pl.DataFrame({"prompt": ["3+3=", "4+4=", "5+5="], "target": ["6", "8", "10"],
                          "rejected": ["7", "nine", "<<leak>>"], "batch_id": "b1", "source": "pair", "scale": 1.0})
    built = dataset.build([plain, pairs], load_recipe(DEFAULT_RECIPE), evals, set(),
                          {**DEFAULT_MIX, "pairs": 0.1}, tmp_path / "train.parquet")
    rows = pl.read_parquet(tmp_path / "train.parquet")
    assert rows.select("target", "rejected", "mix").rows() == [("2", None, "feedback"), ("6", "7", "pairs")]
    assert built.unusable == 2 and built.leak_marker_rows == 1  # "nine" cannot be encoded; the marker is counted
