"""A compact decoder-only transformer (torch only: a process that just answers never imports Lightning; lit_gpt.py
trains it).

Positions by place, read off the tokens, and only relative: attention scores add, per head, a learned score for the
signed distance in places between query and key (clipped) and minus a slope times that distance, so nothing in the
model depends on how long a sequence is and what it learns at one place holds at every other (trained on 1-3
digit sums: half the 16-digit sums right, bench/positions.py). Pre-norm blocks, tied embeddings, nanoGPT-style
init.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GPTConfig:
    vocab_size: int
    separators: list[int]  # tokens between the prompt's segments (an operator): places count from 0 in each
    answer_token: int  # from this token on, each token stands at the place of the token it predicts
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    slopes: list[float] | None = None  # per head: how much less a key one place farther counts (default 0)
    relative: int = 4  # learned score per head for each signed place distance up to this (farther: clipped)
    segments: int = 5  # a, separator, b, answer token, answer


def layout(idx: torch.Tensor, separators: torch.Tensor, answer_token: int, state: tuple | None = None,
           pad: torch.Tensor | None = None):
    """(places, segments, state) of tokens `idx` (B, T) that follow the tokens `state` describes (None: none).
    `pad` (B,): how many tokens each row begins with that are no part of it (left padding): its places start after
    them."""
    B, T = idx.shape
    if state is None:
        zeros = torch.zeros(B, dtype=torch.long, device=idx.device)
        state = (zeros, zeros - 1 if pad is None else pad - 1, zeros.bool(), 0)
    count0, last0, answered0, t0 = state
    is_answer = idx == answer_token
    boundary = torch.isin(idx, separators) | is_answer
    pos = torch.arange(t0, t0 + T, device=idx.device).expand(B, T)
    count = count0[:, None] + boundary.long().cumsum(1)
    segments = 2 * count - boundary.long()
    last = torch.where(boundary, pos, -1).cummax(1).values.maximum(last0[:, None])
    answered = answered0[:, None] | (is_answer.long().cumsum(1) > 0)
    places = torch.where(boundary, 0, pos - last - 1 + answered.long())
    return places, segments, (count[:, -1], last[:, -1], answered[:, -1], t0 + T)


class SelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        """`mask`: additive scores (B, heads, queries, keys), -inf where a key may not be seen."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if cache is not None:  # decoding: keys and values of the earlier tokens are kept, not recomputed
            k, v = _kept(cache, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype))
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class _Lookup(torch.autograd.Function):
    """Each head's learned score (`relative`, heads x buckets) at each (B, queries, keys) bucket, as (B, heads,
    queries, keys). Its gradient sums the scores' gradients per bucket with `bincount`: autograd's own for the
    gather, a scatter-add into a few buckets, took a fifth of a training step (bench/step_kernels.py)."""

    @staticmethod
    def forward(ctx, relative: torch.Tensor, bucket: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(bucket)
        ctx.buckets = relative.shape[1]
        return relative[:, bucket].transpose(0, 1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (bucket,) = ctx.saved_tensors
        flat = bucket.flatten()
        return torch.stack([torch.bincount(flat, weights=g.flatten(), minlength=ctx.buckets)
                            for g in grad.transpose(0, 1)]).to(grad.dtype), None


def _kept(cache: list, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """All keys and values so far, the new ones written into buffers that double when full: appending by
    concatenation copied the whole cache at every token (8,000 sums of 70 digits decoded 2.3x slower,
    bench/decoding.py)."""
    if not cache:
        cache[:] = [k, v, k.shape[2]]
        return k, v
    keys, values, n = cache
    end = n + k.shape[2]
    if end > keys.shape[2]:
        grown = [t.new_empty(*t.shape[:2], max(2 * t.shape[2], end), t.shape[3]) for t in (keys, values)]
        for new, old in zip(grown, (keys, values), strict=True):
            new[:, :, :n] = old[:, :, :n]
        keys, values = grown
    keys[:, :, n:end], values[:, :, n:end] = k, v
    cache[:] = [keys, values, end]
    return keys[:, :, :end], values[:, :, :end]


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), mask, cache)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.seg = nn.Embedding(cfg.segments, cfg.n_embd)
        self.relative = nn.Parameter(torch.zeros(cfg.n_head, 2 * cfg.relative + 1))
        self.register_buffer("separators", torch.tensor(cfg.separators), persistent=False)
        self.register_buffer("slopes", torch.tensor(cfg.slopes or [0.0] * cfg.n_head).view(1, -1, 1, 1),
                             persistent=False)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight
        self.apply(self._init)
        for name, p in self.named_parameters():  # scaled residual projections, as in GPT-2
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, cache: list | None = None, pad: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for tokens `idx`. `cache` (decoding): a list, empty at first, that keeps each block's keys and
        values and where the tokens so far stand, so the next call passes only the new tokens. `pad` (B,), on the
        first call only: how many tokens each row is left-padded with, never seen as keys, so rows of different
        lengths decode together as if each were alone."""
        return self.head(self.hidden(idx, cache, pad))

    def hidden(self, idx: torch.Tensor, cache: list | None = None, pad: torch.Tensor | None = None) -> torch.Tensor:
        """The last layer's hidden states, normed: what the head reads (and a reward model's head)."""
        state = cache[-1] if cache else {"start": 0, "layout": None, "pad": pad}
        start, T = state["start"], idx.shape[1]
        places, segments, where = layout(idx, self.separators, self.cfg.answer_token, state["layout"], state["pad"])
        # a sampled answer may write a separator: its later tokens count as segments past the last
        x = self.tok(idx) + self.seg(segments.clamp(max=self.cfg.segments - 1))
        keys = torch.cat([state["places"], places], 1) if start else places
        distance = places[:, :, None] - keys[:, None, :]
        k = self.cfg.relative
        scores = (-self.slopes * distance.abs()[:, None].to(x.dtype)
                  + _Lookup.apply(self.relative, distance.clamp(-k, k) + k))
        seen = torch.ones(T, start + T, dtype=torch.bool, device=idx.device).tril(start)
        if state["pad"] is not None:  # a padding token still sees itself: a row with no key at all would be NaN
            key, query = torch.arange(start + T, device=idx.device), torch.arange(T, device=idx.device)[:, None]
            seen = ((seen & (key >= state["pad"][:, None, None])) | (key == start + query))[:, None]
        mask = scores.masked_fill(~seen, float("-inf"))
        if cache is not None:
            if not cache:
                cache += [[] for _ in self.blocks] + [None]
            cache[-1] = {"start": start + T, "layout": where, "places": keys, "pad": state["pad"]}
        for i, block in enumerate(self.blocks):
            x = block(x, mask, None if cache is None else cache[i])
        return self.ln_f(x)
