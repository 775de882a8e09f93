"""The training loss every recipe's module takes on a batch of rows, and the teacher of token-level distillation.

A row is (tokens, loss_mask[, scale, source[, teacher[, kto[, dpo]]]]). The loss is the mean negative
log-likelihood of the masked (answer) tokens; `scale` multiplies it (1 to imitate, a group-relative advantage for a
sampled answer, 0 for a row that teaches only through its teacher or its pair); `teacher` indexes the next-token
distributions the model gave with a coach's hint in the prompt (-1: none): on such a row the model without the hint
is pulled toward them by KL(teacher || model) on each answer token (token-level self-distillation); `kto` indexes
the module's KTO reference (-1: none): such a row also takes the KTO loss (Ethayarajh et al. 2024, TRL's
loss_type="kto"), desirable (a thumbs-up) or undesirable (a thumbs-down), against the warm-start model as the frozen
reference; `dpo` indexes the module's DPO reference (-1: none): such a row's target is the chosen answer of a pair,
and it also takes the DPO loss (Rafailov et al. 2023, TRL's loss_type="sigmoid") against the answer it was preferred
to, with the same warm-start model as the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .distill import Distillation, distill_term

NEGATIVE_LOSS_CAP = 5.0  # an already unlikely sampled answer stops pulling


def trimmed(batch) -> list:
    """The batch without its trailing columns of padding, up to its longest answer end: fit's batches come cut so
    already (ml/rows.py), a 2-D pair's rows are right-padded to its widest row."""
    width = int(batch[1].any(0).nonzero().max()) + 1 if batch[1].any() else batch[1].shape[1]
    return [batch[0][:, :width], batch[1][:, :width], *batch[2:]]


def row_losses(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean NLL of each row's masked tokens; `logits` predict tokens[:, 1:]."""
    target_mask = mask[:, 1:].float()
    nll = F.cross_entropy(logits.transpose(1, 2).float(), tokens[:, 1:], reduction="none")
    return (nll * target_mask).sum(1) / target_mask.sum(1).clamp(min=1)


def batch_loss(logits: torch.Tensor, batch, teacher: torch.Tensor | None = None, kto: KTOReference | None = None,
               policy=None, dpo: DPOReference | None = None,
               distill: Distillation | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, per-row NLL) of a batch of rows; `policy(tokens)` gives logits, for the KTO rows' mismatched pairs and
    the DPO rows' rejected answers; `distill`: a teacher model's distributions (ml/distill.py)."""
    tokens, mask = batch[0].long(), batch[1]
    row_loss = row_losses(logits, tokens, mask)
    if len(batch) > 2:
        scale = batch[2].to(row_loss.dtype)
        loss = (torch.where(scale < 0, row_loss.clamp(max=NEGATIVE_LOSS_CAP), row_loss) * scale).mean()
    else:
        loss = row_loss.mean()
    if len(batch) > 4 and teacher is not None:
        loss = loss + kl_to_teacher(logits, mask[:, 1:], batch[4], teacher)
    if len(batch) > 5 and kto is not None:
        loss = loss + kto_term(logits, batch, kto, policy)
    if len(batch) > 6 and dpo is not None:
        loss = loss + dpo_term(logits, batch, dpo, policy)
    if distill is not None:
        loss = loss + distill_term(logits, batch, distill)
    return loss, row_loss


def kl_to_teacher(logits: torch.Tensor, target_mask: torch.Tensor, rows: torch.Tensor,
                  teacher: torch.Tensor) -> torch.Tensor:
    """Sum over the batch's taught rows of their mean KL(teacher || model) per answer token, over the batch size.

    `teacher` (taught rows, answer tokens, vocab) holds log-probs: the k-th masked position of a row is its k-th
    answer token, whatever the prompt's length (the teacher's prompt has the hint, the row's has not)."""
    taught = rows >= 0
    if not taught.any():
        return logits.new_zeros(())
    mask = target_mask[taught].bool()
    student = torch.log_softmax(logits[taught].float(), dim=-1)  # (n, T-1, V)
    place = (mask.cumsum(1) - 1).clamp(min=0, max=teacher.shape[1] - 1)
    target = teacher[rows[taught].cpu()].to(student.device)  # (n, A, V): only this batch's rows move
    target = torch.gather(target, 1, place.unsqueeze(-1).expand(-1, -1, target.shape[-1]))  # (n, T-1, V)
    kl = (target.exp() * (target - student)).sum(-1) * mask
    return (kl.sum(1) / mask.sum(1).clamp(min=1)).sum() / len(rows)


def taught_by_teacher(recipe, module, teachers: list[str | None], targets: list[str]) -> torch.Tensor:
    """Token-level self-distillation of hinted successes: `module`'s log-probs on each target with its hinted
    prompt (`teachers`, None: not taught so) become `module.teacher`; returns each row's index into them (-1)."""
    at = [i for i, t in enumerate(teachers) if t is not None]
    rows = torch.full((len(teachers),), -1, dtype=torch.long)
    if at:
        tokens, mask = recipe.encode(module, [teachers[i] for i in at], [targets[i] for i in at])
        module.teacher = teacher_log_probs(module, tokens, mask)
        rows[torch.tensor(at)] = torch.arange(len(at))
    return rows


@torch.no_grad()
def teacher_log_probs(model, tokens: torch.Tensor, mask: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
    """(rows, answer tokens, vocab) log-probs the model gives each answer token of (hinted prompt, answer) rows;
    `model(tokens)` returns logits."""
    was_training = model.training
    model.eval()
    width = int(mask[:, 1:].sum(1).max())
    out = []
    for start in range(0, len(tokens), batch_size):
        ids, m = tokens[start:start + batch_size].long(), mask[start:start + batch_size, 1:]
        logp = torch.log_softmax(model(ids[:, :-1]).float(), dim=-1).cpu()
        chunk = torch.zeros(len(ids), width, logp.shape[-1])
        for i in range(len(ids)):
            where = m[i].nonzero().squeeze(1)
            chunk[i, :len(where)] = logp[i, where]
        out.append(chunk)
    model.train(was_training)
    return torch.cat(out)


def sequence_log_probs(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's log-probability of its masked (answer) tokens, summed as KTO's and DPO's implied rewards want (TRL
    sums them too, not a mean: a longer completion moves further); `logits` predict tokens[:, 1:]."""
    logp = -F.cross_entropy(logits.transpose(1, 2).float(), tokens[:, 1:].long(), reduction="none")
    return (logp * mask[:, 1:].float()).sum(1)


def kto_loss(policy_logps: torch.Tensor, reference_logps: torch.Tensor, policy_kl_logps: torch.Tensor,
             reference_kl_logps: torch.Tensor, desirable: torch.Tensor, beta: float, desirable_weight: float = 1.0,
             undesirable_weight: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(weighted loss of each row, reference point z) of KTO: with r = policy - reference log-prob of a row's
    completion, a desirable row loses lambda_D (1 - sigmoid(beta (r - z))), an undesirable one lambda_U
    (1 - sigmoid(beta (z - r))). z estimates KL(policy || reference) from mismatched (prompt, completion) pairs:
    their mean policy - reference log-prob, clamped at 0 and detached, as TRL does: a baseline, not a target."""
    z = (policy_kl_logps - reference_kl_logps).mean().detach().clamp(min=0)
    ratio = policy_logps - reference_logps
    return torch.where(desirable.bool(), desirable_weight * (1 - torch.sigmoid(beta * (ratio - z))),
                       undesirable_weight * (1 - torch.sigmoid(beta * (z - ratio)))), z


def balanced_weights(desirable: float, undesirable: float) -> tuple[float, float]:
    """(lambda_D, lambda_U) with lambda_D n_D = lambda_U n_U, the larger 1: the KTO authors advise lambda_D n_D /
    (lambda_U n_U) in [1, 4/3], so the rarer kind is not drowned by the commoner; `desirable`, `undesirable`: the
    expected rows of each kind a batch draws (their sampling weights' sums)."""
    if desirable <= 0 or undesirable <= 0:
        return 1.0, 1.0
    return min(1.0, undesirable / desirable), min(1.0, desirable / undesirable)


@dataclass
class KTOReference:
    """What the warm-start model said about each KTO row, computed once before training: the frozen reference."""

    desirable: torch.Tensor  # (rows,) bool: a thumbs-up to make likelier; false: a thumbs-down to make less likely
    logps: torch.Tensor  # (rows,) the reference's log-probability of the row's completion
    kl_tokens: torch.Tensor  # (rows, T) the row's prompt with another KTO row's completion: a mismatched pair
    kl_mask: torch.Tensor  # (rows, T) that completion's tokens
    kl_logps: torch.Tensor  # (rows,) the reference's log-probability of the mismatched pair's completion
    beta: float = 0.1
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0


def kto_term(logits: torch.Tensor, batch, kto: KTOReference, policy) -> torch.Tensor:
    """Sum of the KTO losses of the batch's KTO rows (column 5, -1: none) over the batch size; z from the policy's
    log-probs of those rows' mismatched pairs, one forward without gradient (TRL's KL pass)."""
    rows = batch[5]
    at = rows >= 0
    if not at.any():
        return logits.new_zeros(())
    index = rows[at].cpu()
    mine = sequence_log_probs(logits[at], batch[0][at], batch[1][at])
    width = int(kto.kl_mask[index].any(0).nonzero().max()) + 1
    kl_tokens = kto.kl_tokens[index, :width].long().to(logits.device)
    with torch.no_grad():
        theirs = sequence_log_probs(policy(kl_tokens[:, :-1]), kl_tokens, kto.kl_mask[index, :width].to(logits.device))
    losses, _ = kto_loss(mine, kto.logps[index].to(mine), theirs, kto.kl_logps[index].to(mine),
                         kto.desirable[index].to(logits.device), kto.beta, kto.desirable_weight, kto.undesirable_weight)
    return losses.sum() / len(rows)


def kto_reference(recipe, module, prompts: list[str], targets: list[str], desirable: list[bool | None],
                  groups: list, beta: float, weights: torch.Tensor | None = None) -> torch.Tensor:
    """KTO of the rows whose `desirable` is True or False (None: not a KTO row): `module`'s log-probs now, before it
    trains, become `module.kto`; returns each row's index into it (-1). A row's mismatched pair is its prompt with the
    completion of the previous KTO row of its group (TRL rotates a batch's completions by one the same way); within
    a group (the recipe's tier) another row's completion is one the prompt can take. `weights` (the rows' sampling
    weights, or how often training draws each) balance lambda_D and lambda_U by the rows of each kind a batch draws."""
    at = [i for i, d in enumerate(desirable) if d is not None]
    rows = torch.full((len(desirable),), -1, dtype=torch.long)
    if not at:
        return rows
    previous, last = {}, {}
    for i in at + at:  # twice round: the first row of a group pairs with its last
        if groups[i] in last and i not in previous:
            previous[i] = last[groups[i]]
        last[groups[i]] = i
    tokens, mask = recipe.encode(module, [prompts[i] for i in at], [targets[i] for i in at])
    kl_tokens, kl_mask = _mismatched(recipe, module, [prompts[i] for i in at], [targets[previous[i]] for i in at],
                                     [targets[i] for i in at])
    kinds = torch.tensor([bool(desirable[i]) for i in at])
    drawn = weights[torch.tensor(at)].double() if weights is not None else torch.ones(len(at), dtype=torch.float64)
    lambda_d, lambda_u = balanced_weights(float(drawn[kinds].sum()), float(drawn[~kinds].sum()))
    module.kto = KTOReference(desirable=kinds, logps=completion_log_probs(module, tokens, mask), kl_tokens=kl_tokens,
                              kl_mask=kl_mask, kl_logps=completion_log_probs(module, kl_tokens, kl_mask), beta=beta,
                              desirable_weight=lambda_d, undesirable_weight=lambda_u)
    rows[torch.tensor(at)] = torch.arange(len(at))
    return rows


def _mismatched(recipe, module, prompts: list[str], others: list[str], own: list[str]):
    """(tokens, mask) of each prompt with another row's completion; where the recipe cannot take that pair, the
    row's own completion (the pair then measures the row's own ratio, as a batch of one does in TRL)."""
    try:
        return recipe.encode(module, prompts, others)
    except ValueError:
        pass
    pairs = []
    for prompt, other, mine in zip(prompts, others, own, strict=True):
        try:
            pairs.append(recipe.encode(module, [prompt], [other]))
        except ValueError:
            pairs.append(recipe.encode(module, [prompt], [mine]))
    width = max(t.shape[1] for t, _ in pairs)
    pad = torch.nn.functional.pad
    return (torch.cat([pad(t, (0, width - t.shape[1])) for t, _ in pairs]),
            torch.cat([pad(m, (0, width - m.shape[1])) for _, m in pairs]))


def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
             reference_chosen_logps: torch.Tensor, reference_rejected_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """Each pair's DPO loss, -log sigmoid(beta ((pi_c - ref_c) - (pi_r - ref_r))) of summed completion log-probs:
    TRL's loss_type="sigmoid" without label smoothing; the chosen answer gains on the rejected one against the
    reference, and a pair stops pulling once its margin is well past the reference's (beta: how soon)."""
    margin = (policy_chosen_logps - reference_chosen_logps) - (policy_rejected_logps - reference_rejected_logps)
    return -F.logsigmoid(beta * margin)


@dataclass
class DPOReference:
    """What the warm-start model said about both answers of each pair, computed once before training: the frozen
    reference. The chosen answer is the row's own target; the rejected one is kept here, encoded."""

    rejected_tokens: torch.Tensor  # (pairs, T) the row's prompt with the rejected answer
    rejected_mask: torch.Tensor  # (pairs, T) the rejected answer's tokens
    chosen_logps: torch.Tensor  # (pairs,) the reference's log-probability of the chosen answer
    rejected_logps: torch.Tensor  # (pairs,) and of the rejected one
    beta: float = 0.1


def dpo_term(logits: torch.Tensor, batch, dpo: DPOReference, policy) -> torch.Tensor:
    """Sum of the DPO losses of the batch's pair rows (column 6, -1: none) over the batch size, as KTO's term is;
    the rejected answers take one more forward, with gradient (the loss pushes them down)."""
    rows = batch[6]
    at = rows >= 0
    if not at.any():
        return logits.new_zeros(())
    index = rows[at].cpu()
    chosen = sequence_log_probs(logits[at], batch[0][at], batch[1][at])
    width = int(dpo.rejected_mask[index].any(0).nonzero().max()) + 1
    tokens = dpo.rejected_tokens[index, :width].long().to(logits.device)
    rejected = sequence_log_probs(policy(tokens[:, :-1]), tokens, dpo.rejected_mask[index, :width].to(logits.device))
    losses = dpo_loss(chosen, rejected, dpo.chosen_logps[index].to(chosen), dpo.rejected_logps[index].to(chosen),
                      dpo.beta)
    return losses.sum() / len(rows)


def dpo_reference(recipe, module, prompts: list[str], chosen: list[str], rejected: list[str | None],
                  beta: float) -> torch.Tensor:
    """DPO of the rows with a `rejected` answer (None: not a pair): `module`'s log-probs of both answers now, before
    it trains, become `module.dpo`; returns each row's index into it (-1), as kto_reference does."""
    at = [i for i, r in enumerate(rejected) if r is not None]
    rows = torch.full((len(rejected),), -1, dtype=torch.long)
    if not at:
        return rows
    tokens, mask = recipe.encode(module, [prompts[i] for i in at], [chosen[i] for i in at])
    rejected_tokens, rejected_mask = recipe.encode(module, [prompts[i] for i in at], [rejected[i] for i in at])
    module.dpo = DPOReference(rejected_tokens=rejected_tokens, rejected_mask=rejected_mask,
                              chosen_logps=completion_log_probs(module, tokens, mask),
                              rejected_logps=completion_log_probs(module, rejected_tokens, rejected_mask), beta=beta)
    rows[torch.tensor(at)] = torch.arange(len(at))
    return rows


@torch.no_grad()
def completion_log_probs(model, tokens: torch.Tensor, mask: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
    """(rows,) log-probability the model in eval mode gives each row's answer tokens, on the CPU; `model(tokens)`
    returns logits."""
    was_training, device = model.training, next(model.parameters()).device
    model.eval()
    out = []
    for start in range(0, len(tokens), batch_size):
        ids, m = tokens[start:start + batch_size].long().to(device), mask[start:start + batch_size].to(device)
        out.append(sequence_log_probs(model(ids[:, :-1]), ids, m).cpu())
    model.train(was_training)
    return torch.cat(out)


def adamw_warmup_cosine(parameters, learning_rate: float, warmup_steps: int, max_steps: int) -> dict:
    """AdamW over the parameters that train; linear warmup, then cosine decay to a tenth of the peak. Fused on the
    CPU or a GPU: one kernel for all parameters took a fifth of the per-tensor time (a tiny model's step, 4%)."""
    trained = [p for p in parameters if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=learning_rate, betas=(0.9, 0.99), weight_decay=0.01,
                            fused=all(p.device.type in ("cpu", "cuda") for p in trained) or None)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
