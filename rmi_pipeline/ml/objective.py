"""The training loss every recipe's module takes on a batch of rows, and the teacher of token-level distillation.

A row is (tokens, loss_mask[, scale, source[, teacher]]). The loss is the mean negative log-likelihood of the
masked (answer) tokens; `scale` multiplies it (1 to imitate, a group-relative advantage for a sampled answer,
0 for a row that teaches only through its teacher); `teacher` indexes the next-token distributions the model
gave with a coach's hint in the prompt (-1: none): on such a row the model without the hint is pulled toward
them by KL(teacher || model) on each answer token (token-level self-distillation).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

NEGATIVE_LOSS_CAP = 5.0  # an already unlikely sampled answer stops pulling


def trimmed(batch) -> list:
    """The batch without its trailing columns of padding: rows are right-padded to the longest row of the whole
    dataset (a hinted prompt can be three times a plain one), a batch needs only its own longest."""
    width = int(batch[1].any(0).nonzero().max()) + 1 if batch[1].any() else batch[1].shape[1]
    return [batch[0][:, :width], batch[1][:, :width], *batch[2:]]


def row_losses(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean NLL of each row's masked tokens; `logits` predict tokens[:, 1:]."""
    target_mask = mask[:, 1:].float()
    nll = F.cross_entropy(logits.transpose(1, 2).float(), tokens[:, 1:], reduction="none")
    return (nll * target_mask).sum(1) / target_mask.sum(1).clamp(min=1)


def batch_loss(logits: torch.Tensor, batch, teacher: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, per-row NLL) of a batch of rows."""
    tokens, mask = batch[0].long(), batch[1]
    row_loss = row_losses(logits, tokens, mask)
    if len(batch) > 2:
        scale = batch[2].to(row_loss.dtype)
        loss = (torch.where(scale < 0, row_loss.clamp(max=NEGATIVE_LOSS_CAP), row_loss) * scale).mean()
    else:
        loss = row_loss.mean()
    if len(batch) > 4 and teacher is not None:
        loss = loss + kl_to_teacher(logits, mask[:, 1:], batch[4], teacher)
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


def adamw_warmup_cosine(parameters, learning_rate: float, warmup_steps: int, max_steps: int) -> dict:
    """AdamW over the parameters that train; linear warmup, then cosine decay to a tenth of the peak."""
    opt = torch.optim.AdamW([p for p in parameters if p.requires_grad], lr=learning_rate, betas=(0.9, 0.99),
                            weight_decay=0.01)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
