"""KTO on thumbs: our loss is TRL's (its own code, on the same batch), and a few steps of it move a model the way a
user's thumbs say: a thumbs-down completion less likely than the warm-start model found it, a thumbs-up one likelier.
"""

import random
from collections import defaultdict
from functools import partial
from types import SimpleNamespace

import polars as pl
import pytest
import torch

from rmi_pipeline.ml.objective import (
    balanced_weights,
    completion_log_probs,
    kto_loss,
    kto_reference,
    sequence_log_probs,
)
from rmi_pipeline.ml.train import fit
from rmi_pipeline.recipes.base import load_recipe
from rmi_pipeline.settings import DEFAULT_RECIPE, Training


class _TinyLM(torch.nn.Module):
    """Logits from the current token alone; called the way TRL's KTO and DPO trainers call a model with
    `fused_lm_head`, it returns what they read: each next token's log-prob where labels are set (0 elsewhere),
    entropy, mean logits, whether the next token is the most likely one."""

    def __init__(self, vocab: int):
        super().__init__()
        self.table = torch.nn.Embedding(vocab, vocab)

    def forward(self, input_ids, attention_mask=None, labels=None, fused_lm_head=False, use_cache=None):
        logits = self.table(input_ids)[:, :-1]
        if not fused_lm_head:
            return logits
        logp = torch.log_softmax(logits, -1)
        taken = labels[:, 1:] != -100
        token_logp = logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1) * taken
        return SimpleNamespace(log_probs=token_logp, entropy=-(logp.exp() * logp).sum(-1), mean_logits=logits.mean(-1),
                               is_top1=logits.argmax(-1) == input_ids[:, 1:])


def _trl_kto_loss(model, batch: dict, beta: float, desirable_weight: float, undesirable_weight: float):
    """TRL's own KTO loss (KTOTrainer._compute_loss, loss_type="kto", reference log-probs precomputed) on `batch`,
    called unbound with the few attributes it reads: a trainer needs a real model, tokenizer and dataset."""
    from trl.trainer.kto_trainer import KTOTrainer

    trainer = SimpleNamespace(
        model=model, beta=beta, loss_type="kto", desirable_weight=desirable_weight,
        undesirable_weight=undesirable_weight, calculate_KL=True, precompute_ref_logps=True, aux_loss_enabled=False,
        accelerator=SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, _total_train_tokens=0, _tp_size=1)
    trainer._compute_kl_logps = partial(KTOTrainer._compute_kl_logps, trainer)
    return KTOTrainer._compute_loss(trainer, model, batch, return_outputs=False)


def _pairs(generator, rows: int, vocab: int, width: int):
    """Right-padded (prompt, completion) rows of random lengths: (input ids, attention mask, completion mask)."""
    ids = torch.randint(vocab, (rows, width), generator=generator)
    prompt = torch.randint(1, 5, (rows, 1), generator=generator)
    length = prompt + torch.randint(1, width - 5, (rows, 1), generator=generator)
    at = torch.arange(width)
    return ids, (at < length).long(), ((at >= prompt) & (at < length)).long()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_our_kto_loss_and_its_gradient_are_trl_s_on_the_same_batch(seed):
    import trl

    generator = torch.Generator().manual_seed(seed)
    rows, vocab, width, beta = 12, 11, 14, 0.1
    ids, attention, completion = _pairs(generator, rows, vocab, width)
    kl_ids, kl_attention, kl_completion = _pairs(generator, rows, vocab, width)
    label = torch.rand(rows, generator=generator) < 0.4
    label[:2] = torch.tensor([True, False])  # both kinds in every batch
    # the reference sits near the policy; its mismatched pairs lower (seeds 0, 1: z > 0) or higher (seed 2: z
    # clamped at 0)
    reference = torch.randn(rows, generator=generator) * 3 - 20
    reference_kl = torch.randn(rows, generator=generator) * 3 + (-25.0, -20.0, 0.0)[seed]
    lambda_d, lambda_u = balanced_weights(float(label.sum()), float((~label).sum()))

    model = _TinyLM(vocab)
    torch.manual_seed(seed)
    torch.nn.init.normal_(model.table.weight, std=2.0)
    trl_loss = _trl_kto_loss(model, {
        "input_ids": ids, "attention_mask": attention, "completion_mask": completion, "KL_input_ids": kl_ids,
        "KL_attention_mask": kl_attention, "KL_completion_mask": kl_completion, "label": label,
        "ref_logps": reference, "ref_KL_logps": reference_kl}, beta, lambda_d, lambda_u)
    (trl_grad,) = torch.autograd.grad(trl_loss, model.table.weight)

    policy = sequence_log_probs(model(ids), ids, completion)
    with torch.no_grad():
        policy_kl = sequence_log_probs(model(kl_ids), kl_ids, kl_completion)
    losses, z = kto_loss(policy, reference, policy_kl, reference_kl, label, beta, lambda_d, lambda_u)
    ours = losses.mean()
    (our_grad,) = torch.autograd.grad(ours, model.table.weight)

    print(f"trl {trl.__version__} seed {seed}: loss {float(trl_loss):.6f} ours {float(ours):.6f} z {float(z):.4f} "
          f"|diff| {abs(float(trl_loss - ours)):.2e}, gradient {float((trl_grad - our_grad).abs().max()):.2e}")
    assert abs(float(trl_loss - ours)) < 1e-5
    assert torch.allclose(trl_grad, our_grad, atol=1e-5)
    assert not z.requires_grad and (float(z) == 0) == (seed == 2)


def test_the_reference_point_is_clamped_at_zero_and_carries_no_gradient():
    policy = torch.tensor([-3.0, -5.0], requires_grad=True)
    kl_below = torch.tensor([-30.0, -31.0], requires_grad=True)  # the policy finds mismatched pairs less likely
    losses, z = kto_loss(policy, torch.tensor([-4.0, -4.0]), kl_below, torch.tensor([-20.0, -20.0]),
                         torch.tensor([True, False]), beta=0.5)
    assert float(z) == 0.0 and not z.requires_grad
    losses.sum().backward()
    assert kl_below.grad is None  # z is a baseline, not something to train
    # with z = 0 the losses are 1 - sigmoid(beta r) and 1 - sigmoid(-beta r)
    expected = torch.tensor([1 - torch.sigmoid(torch.tensor(0.5)), 1 - torch.sigmoid(torch.tensor(0.5))])
    assert torch.allclose(losses.detach(), expected)


def test_desirable_and_undesirable_weights_are_balanced_as_the_kto_authors_advise():
    for n_d, n_u in [(30.0, 10.0), (10.0, 30.0), (5.0, 5.0), (1000.0, 3.0)]:
        lambda_d, lambda_u = balanced_weights(n_d, n_u)
        assert 1 <= lambda_d * n_d / (lambda_u * n_u) <= 4 / 3 and max(lambda_d, lambda_u) == 1
    assert balanced_weights(0.0, 12.0) == (1.0, 1.0)  # one kind only: nothing to balance


def _thumbs(rows: int = 48):
    """Arithmetic rows a user rated: the right answer (thumbs-up) for half, a wrong one of as many digits
    (thumbs-down) for the rest."""
    tasks = [t for t in load_recipe(DEFAULT_RECIPE).seed_tasks(random.Random(0)) if t.tier in (2, 3)][:rows]
    rng = random.Random(1)
    wrong = [str((int(t.answer) + rng.randrange(1, 9 * 10 ** (len(t.answer) - 1))) % 10 ** len(t.answer)).zfill(
        len(t.answer)) for t in tasks]
    up = [i % 2 == 0 for i in range(rows)]
    return ([t.prompt for t in tasks], [t.answer if u else w for t, u, w in zip(tasks, up, wrong, strict=True)], up,
            [t.tier for t in tasks])


def test_a_few_kto_steps_make_thumbs_down_answers_less_likely_and_thumbs_up_ones_likelier():
    recipe = load_recipe(DEFAULT_RECIPE)
    torch.manual_seed(0)
    module = recipe.build_model(3e-3, 40)
    prompts, targets, up, tiers = _thumbs()
    kto_rows = kto_reference(recipe, module, prompts, targets, up, tiers, beta=0.1)
    assert (kto_rows == torch.arange(len(up))).all()
    before = module.kto.logps.clone()
    assert (module.kto.desirable == torch.tensor(up)).all()
    assert (module.kto.desirable_weight, module.kto.undesirable_weight) == (1.0, 1.0)  # as many of each
    # each mismatched pair is another row's completion under this row's prompt
    assert not torch.equal(module.kto.kl_logps, before)

    tokens, mask = recipe.encode(module, prompts, targets)
    fit(module, tokens, mask, max_steps=40, max_seconds=60, batch_size=16, trainer={"accelerator": "cpu"},
        scales=torch.zeros(len(up)), kto_rows=kto_rows)  # the KTO loss alone trains
    ratio = completion_log_probs(module, tokens, mask) - before
    desirable = torch.tensor(up)
    print(f"log-prob change: thumbs-up {ratio[desirable].mean():+.3f}, thumbs-down {ratio[~desirable].mean():+.3f}")
    assert ratio[desirable].mean() > 0.5 and ratio[~desirable].mean() < -0.5
    assert (ratio[desirable] > 0).float().mean() > 0.8 and (ratio[~desirable] < 0).float().mean() > 0.8


WARM_STEPS = 300


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A champion that knows the answers' form, as a warm start does: (the model, its checkpoint's path)."""
    recipe = load_recipe(DEFAULT_RECIPE)
    torch.manual_seed(0)
    model = recipe.build_model(3e-3, WARM_STEPS)
    seed = recipe.seed_tasks(random.Random(1))
    fit(model, *recipe.encode(model, [t.prompt for t in seed], [t.answer for t in seed]), max_steps=WARM_STEPS,
        max_seconds=60, batch_size=64, trainer={"accelerator": "cpu"})
    path = tmp_path_factory.mktemp("warm") / "warm.ckpt"
    path.write_bytes(recipe.checkpoint(model))
    return model, path


# a thumbs-up and a thumbs-down; an answer copied and one asked again (implicit signals: KTO with no thumbs-down)
@pytest.mark.parametrize("liked, disliked", [("feedback", "thumbs_down"), ("copied", "asked_again")])
def test_the_training_program_trains_undesirable_rows_by_kto_against_the_warm_start_never_as_targets(
        tmp_path, warm, liked, disliked):
    from rmi_pipeline.training.program import train

    recipe = load_recipe(DEFAULT_RECIPE)
    model, checkpoint = warm
    prompts, targets, up, tiers = _thumbs()
    rows = pl.DataFrame({"prompt": prompts, "target": targets, "mix": [liked if u else disliked for u in up],
                         "scale": 1.0, "reference": None, "teacher": None, "skill": "add", "tier": tiers},
                        schema_overrides={"reference": pl.String, "teacher": pl.String})
    rows.write_parquet(tmp_path / "train.parquet")
    metrics = train({
        "recipe": DEFAULT_RECIPE, "dataset_uri": str(tmp_path / "train.parquet"), "storage_options": {},
        "warm_start_uri": str(checkpoint), "checkpoint_uri": str(tmp_path / "candidate.ckpt"),
        "mix_weights": {liked: 0.5 / 24, disliked: 0.5 / 24}, "model_size": "tiny", "steps": 40,
        "max_seconds": 60, "seed": 0, "batch_size": 16, "learning_rate": 3e-3, "kto_beta": 0.1,
        "trainer": {**Training().hardware(), "accelerator": "cpu"}})
    assert metrics[f"rows_{disliked}"] == metrics[f"rows_{liked}"] == 24 and metrics["steps_done"] == 40

    candidate = recipe.load_checkpoint((tmp_path / "candidate.ckpt").read_bytes())
    tokens, mask = recipe.encode(model, prompts, targets)
    ratio = completion_log_probs(candidate, tokens, mask) - completion_log_probs(model, tokens, mask)
    desirable = torch.tensor(up)
    print(f"log-prob change: {liked} {ratio[desirable].mean():+.3f}, {disliked} {ratio[~desirable].mean():+.3f}")
    assert ratio[desirable].mean() > 0.5  # imitated and KTO-desirable
    assert ratio[~desirable].mean() < 0  # undesirable: pushed down, though its prompts' right answers rise


def test_the_kto_reference_is_the_warm_start_s_for_each_row_training_draws_and_for_no_other(tmp_path, warm):
    """A history of thousands of rated rows in several row groups and a few steps: the warm-start model's log-probs
    are computed for the rows the sampler draws, not the history, and each drawn row's reference is its own."""
    import lightning as L

    from rmi_pipeline.training.program import train

    recipe = load_recipe(DEFAULT_RECIPE)
    model, checkpoint = warm
    tasks = [t for t in recipe.seed_tasks(random.Random(0)) if t.tier in (2, 3)]
    rng, rows = random.Random(2), 3000
    answers = [str(rng.randrange(10 ** 3)) for _ in range(rows)]  # most wrong: each row's completion its own
    pl.DataFrame({"prompt": [tasks[i % len(tasks)].prompt for i in range(rows)], "target": answers,
                  "mix": ["feedback" if i % 2 else "thumbs_down" for i in range(rows)], "scale": 1.0,
                  "skill": "add", "tier": [tasks[i % len(tasks)].tier for i in range(rows)]}
                 ).write_parquet(tmp_path / "train.parquet", row_group_size=700)

    seen = []

    class Batches(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, index):
            seen.append((batch[0], batch[1], batch[5], module.kto))

    steps, batch = 6, 16
    train({"recipe": DEFAULT_RECIPE, "dataset_uri": str(tmp_path / "train.parquet"), "storage_options": {},
           "warm_start_uri": str(checkpoint), "checkpoint_uri": str(tmp_path / "candidate.ckpt"),
           "mix_weights": {"feedback": 0.5 / rows, "thumbs_down": 0.5 / rows}, "model_size": "tiny", "steps": steps,
           "max_seconds": 60, "seed": 0, "batch_size": batch, "learning_rate": 3e-3, "kto_beta": 0.1,
           "trainer": {**Training().hardware(), "accelerator": "cpu"}}, callbacks=[Batches()])
    assert len(seen) == steps
    reference = seen[0][3]
    assert 0 < len(reference.logps) <= steps * batch < rows / 10
    at = torch.cat([kto for _, _, kto, _ in seen])
    assert (at >= 0).all() and set(at.tolist()) == set(range(len(reference.logps)))  # every one drawn, each used
    tokens = torch.cat([torch.nn.functional.pad(t, (0, 40 - t.shape[1])) for t, _, _, _ in seen])
    mask = torch.cat([torch.nn.functional.pad(m, (0, 40 - m.shape[1])) for _, m, _, _ in seen])
    assert torch.allclose(reference.logps[at], completion_log_probs(model, tokens, mask), atol=1e-5)


def test_thumbs_downs_are_read_only_when_they_train_and_only_from_batches_not_yet_learned():
    import duckdb

    from rmi_pipeline.assets.dataset import _feedback_rows
    from rmi_pipeline.ml.mix import in_mix, mix_sources
    from rmi_pipeline.settings import DEFAULT_MIX

    db = duckdb.connect()
    db.sql("CREATE TABLE feedback_events AS SELECT *, NULL::JSON AS meta FROM (VALUES ('1+1=', '2', 'up', NULL, 'b1'), "
           "('2+2=', '5', 'down', NULL, 'b1'), ('3+3=', '7', 'down', '6', 'b1'), ('4+4=', '9', 'down', NULL, 'b0'), "
           "('5+5=', '10', NULL, NULL, 'b1')) AS t(prompt, completion, rating, correction, batch_id)")
    off = {**DEFAULT_MIX, "thumbs_down": 0.0}  # a team that turns KTO off: its thumbs-downs are not even read
    assert db.sql(_feedback_rows(off)).pl()["source"].to_list() == ["thumbs_up", "correction"]
    rows = db.sql(_feedback_rows({**DEFAULT_MIX, "thumbs_down": 0.2})).pl()
    assert rows.select("target", "source").rows() == [("2", "thumbs_up"), ("5", "thumbs_down"),
                                                      ("6", "correction"), ("9", "thumbs_down")]
    mixed = mix_sources(rows, new_batches=["b1"])
    assert mixed["mix"].to_list() == ["feedback", "thumbs_down", "corrections", None]  # b0's: learned, not replayed
    assert mixed.filter(in_mix({**DEFAULT_MIX, "thumbs_down": 0.2}))["target"].to_list() == ["2", "5", "6"]
    assert mixed.filter(in_mix(off))["target"].to_list() == ["2", "6"]
