"""Batched decoding: one forward pass per new token for the whole batch, greedy or sampled.

`ban` forbids one token at one step of a row (a coach's hint: "that token is wrong"); `temperature` > 0 samples,
which is how the model proposes several answers to one problem (RL groups, self-labelling votes), each row from a
seed of its own (`row_seeds`), so a row samples the same answer in any batch and any process; `top_p` < 1
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
           top_p: float = 1.0, ban: torch.Tensor | None = None, seeds: torch.Tensor | None = None,
           batch_size: int = 2048, pad: torch.Tensor | None = None) -> torch.Tensor:
    """Extend equal-length prompts (B, T) by `new_tokens` tokens; returns only the new tokens. At most
    `batch_size` rows are decoded together, fewer for long prompts (PREFILL_PAIRS).

    `ban` (B, new_tokens) holds a token id to forbid at each step, or -1 for none. `seeds` (B,): each row's
    sampling seed (`row_seeds`; sampled only). `pad` (B,): how many tokens each prompt is left-padded with (a model
    that takes a cache only)."""
    if temperature > 0 and seeds is None:
        raise ValueError("sampled decoding needs a seed per row (row_seeds)")
    takes_cache = "cache" in inspect.signature(model.forward).parameters
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    batch_size = max(1, min(batch_size, PREFILL_PAIRS // max(1, prompts.shape[1]) ** 2))
    for start in range(0, len(prompts), batch_size):
        idx = prompts[start:start + batch_size].to(device)
        banned = None if ban is None else ban[start:start + batch_size].to(device)
        own = None if seeds is None else seeds[start:start + batch_size]
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
                next_tok = drawn(probs, uniform(own, step)).to(device)
            else:
                next_tok = logits.argmax(dim=-1, keepdim=True)
            idx = torch.cat([idx, next_tok], dim=1)
        out.append(idx[:, prompts.shape[1]:].cpu())
    model.train(was_training)
    return torch.cat(out) if out else torch.empty(0, new_tokens, dtype=torch.long)



# splitmix64's increment and multipliers, as int64
_GOLDEN, _M1, _M2 = (c - 2**64 for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def row_seeds(seed: int, rows: int) -> torch.Tensor:
    """A sampling seed for each of `rows` rows (int64), from `seed` and the row's place alone."""
    return _mix(torch.arange(rows, dtype=torch.long) * _GOLDEN + _mix(torch.tensor([_int64(seed)])))


def uniform(seeds: torch.Tensor, step: int) -> torch.Tensor:
    """A draw in [0, 1) per row (float64) from its seed and the step alone: the step-th number of splitmix64
    started at the row's seed."""
    return _shifted(_mix(seeds + _int64((step + 1) * _GOLDEN)), 11).double() * 2.0**-53


def drawn(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(B, 1) tokens drawn from `probs` (B, V) by each row's uniform `u`: the first token whose cumulative probability
    passes u (a token of probability 0 never)."""
    cumulative = probs.double().cumsum(-1)
    return torch.searchsorted(cumulative, (u * cumulative[:, -1]).unsqueeze(1), right=True).clamp(
        max=probs.shape[1] - 1)


def _mix(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer on int64 (products wrap, shifts are logical)."""
    z = (z ^ _shifted(z, 30)) * _M1
    z = (z ^ _shifted(z, 27)) * _M2
    return z ^ _shifted(z, 31)


def _int64(n: int) -> int:
    """n wrapped to a signed 64-bit number, as int64 arithmetic would."""
    return (n + 2**63) % 2**64 - 2**63


def _shifted(z: torch.Tensor, k: int) -> torch.Tensor:
    """z >> k with zeros shifted in, as for an unsigned 64-bit number."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`probs` (B, V) kept on the fewest most likely tokens whose probabilities reach `top_p` (the most likely one
    always), the rest zero: `drawn` draws only from those."""
    ordered, order = probs.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered  # the probability of the more likely tokens
    ordered[before >= top_p] = 0
    return torch.zeros_like(probs).scatter(-1, order, ordered)
