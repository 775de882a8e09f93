"""Batched decoding: one forward pass per new token for the whole batch, greedy or sampled.

`ban` forbids one token at one step of a row (a coach's hint: "that token is wrong"); `temperature` > 0 samples,
which is how the model proposes several answers to one problem (RL groups, self-labelling votes); `top_p` < 1
samples from the fewest most likely tokens whose probabilities reach it (a client's option). A model whose
forward takes a `cache` (gpt.GPT) keeps the keys and values of the tokens so far and is given only the new
token each step (about 6x faster for arithmetic, bench/decoding.py); any other model sees the whole sequence.
"""

from __future__ import annotations

import inspect

import torch

# query-key pairs of attention scores in one batch's first forward pass (rows x prompt tokens squared): gpt.GPT's
# scores cost about 31 bytes a pair there, so 2^26 pairs take about 2 GB. A fixed row count does not bound memory:
# it grows with the square of the prompt's length.
PREFILL_PAIRS = 2**26


@torch.no_grad()
def decode(model: torch.nn.Module, prompts: torch.Tensor, new_tokens: int, *, temperature: float = 0.0,
           top_p: float = 1.0, ban: torch.Tensor | None = None, generator: torch.Generator | None = None,
           batch_size: int = 2048, pad: torch.Tensor | None = None) -> torch.Tensor:
    """Extend equal-length prompts (B, T) by `new_tokens` tokens; returns only the new tokens. At most
    `batch_size` rows are decoded together, fewer for long prompts (PREFILL_PAIRS).

    `ban` (B, new_tokens) holds a token id to forbid at each step, or -1 for none. `pad` (B,): how many tokens
    each prompt is left-padded with (a model that takes a cache only)."""
    takes_cache = "cache" in inspect.signature(model.forward).parameters
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    batch_size = max(1, min(batch_size, PREFILL_PAIRS // max(1, prompts.shape[1]) ** 2))
    for start in range(0, len(prompts), batch_size):
        idx = prompts[start:start + batch_size].to(device)
        banned = None if ban is None else ban[start:start + batch_size].to(device)
        cache: list | None = [] if takes_cache else None
        for step in range(new_tokens):
            if cache is None:
                logits = model(idx)[:, -1].float()
            elif step == 0:
                padded = {} if pad is None else {"pad": pad[start:start + batch_size].to(device)}
                logits = model(idx, cache=cache, **padded)[:, -1].float()
            else:
                logits = model(idx[:, -1:], cache=cache)[:, -1].float()
            if banned is not None:
                rows = (banned[:, step] >= 0).nonzero().squeeze(1)
                logits[rows, banned[rows, step]] = float("-inf")
            if temperature > 0:
                probs = torch.softmax(logits / temperature, dim=-1).cpu()
                if top_p < 1:
                    probs = nucleus(probs, top_p)
                next_tok = torch.multinomial(probs, 1, generator=generator).to(device)
            else:
                next_tok = logits.argmax(dim=-1, keepdim=True)
            idx = torch.cat([idx, next_tok], dim=1)
        out.append(idx[:, prompts.shape[1]:].cpu())
    model.train(was_training)
    return torch.cat(out) if out else torch.empty(0, new_tokens, dtype=torch.long)



def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`probs` (B, V) kept on the fewest most likely tokens whose probabilities reach `top_p` (the most likely one
    always), the rest zero: multinomial draws only from those."""
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered  # the probability of the more likely tokens
    ordered[before >= top_p] = 0
    return torch.zeros_like(probs).scatter(-1, order, ordered)
