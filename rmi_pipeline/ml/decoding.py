"""Batched greedy decoding: one forward pass per new token for the whole batch."""

from __future__ import annotations

import torch


@torch.no_grad()
def greedy(model: torch.nn.Module, prompts: torch.Tensor, new_tokens: int, batch_size: int = 2048) -> torch.Tensor:
    """Extend equal-length prompts (B, T) by `new_tokens` argmax tokens; returns only the new tokens."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    for chunk in prompts.split(batch_size):
        idx = chunk.to(device)
        for _ in range(new_tokens):
            next_tok = model(idx)[:, -1].argmax(dim=-1, keepdim=True)
            idx = torch.cat([idx, next_tok], dim=1)
        out.append(idx[:, chunk.shape[1]:].cpu())
    model.train(was_training)
    return torch.cat(out) if out else torch.empty(0, new_tokens, dtype=torch.long)
