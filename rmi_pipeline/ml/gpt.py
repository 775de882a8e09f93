"""A compact decoder-only transformer and the LightningModule that trains it.

Learned positions (absolute, or by place value for tasks like arithmetic, optionally with attention biased
toward nearby places), pre-norm blocks, tied embeddings, nanoGPT-style init. The loss is taken only where
`loss_mask` is set (the answer tokens), so prompts teach the model nothing it must produce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from .objective import adamw_warmup_cosine, batch_loss, trimmed


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    # Place-value positions: token t gets position id place_ids[t] (tokens of the same place share one), shifted by a
    # random offset up to max_offset in training, so what is learned at one place carries to places never seen.
    place_ids: list[int] | None = None
    segments: list[int] | None = None  # which part of the input each token belongs to (operand, operator, answer)
    max_offset: int = 0
    # the place of each token (any positions): all heads but the last prefer keys of nearby places, the nearer the
    # more, which is the lookup column arithmetic needs from its first steps
    attention_places: list[int] | None = None


class SelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: list | None = None) -> torch.Tensor:
        """`mask`: None for causal attention, else additive scores or allowed keys (bool) for these queries."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if cache is not None:  # decoding: keys and values of the earlier tokens are kept, not recomputed
            if cache:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if mask.dtype == torch.bool
                                               else mask.to(q.dtype))
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: list | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), mask, cache)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        if cfg.place_ids is None:
            self.pos = nn.Embedding(cfg.block_size, cfg.n_embd)
        else:
            self.pos = nn.Embedding(max(cfg.place_ids) + cfg.max_offset + 1, cfg.n_embd)
            self.seg = nn.Embedding(max(cfg.segments) + 1, cfg.n_embd)
            self.register_buffer("place_ids", torch.tensor(cfg.place_ids), persistent=False)
            self.register_buffer("segments", torch.tensor(cfg.segments), persistent=False)
        if cfg.attention_places is not None:
            self.register_buffer("bias", self._place_bias(cfg), persistent=False)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight
        self.apply(self._init)
        for name, p in self.named_parameters():  # scaled residual projections, as in GPT-2
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _place_bias(cfg: GPTConfig) -> torch.Tensor:
        """(heads, T, T) additive attention scores: causal, and minus the distance in places for all but one head."""
        places = torch.tensor(cfg.attention_places, dtype=torch.float)
        distance = (places[:, None] - places[None, :]).abs()
        slopes = torch.tensor([1.0] * (cfg.n_head - 1) + [0.0])
        causal = torch.ones(len(places), len(places), dtype=torch.bool).tril()
        return (-slopes[:, None, None] * distance).masked_fill(~causal, float("-inf"))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        """Logits for tokens `idx`. `cache` (decoding): a list, empty at first, that keeps each block's keys and
        values, so the next call passes only the new tokens."""
        start = cache[0][0].shape[2] if cache else 0
        T = idx.shape[1]
        end = start + T
        if self.cfg.place_ids is None:
            x = self.tok(idx) + self.pos(torch.arange(start, end, device=idx.device))
        else:
            ids = self.place_ids[start:end].expand(idx.shape[0], T)
            if self.training and self.cfg.max_offset:
                ids = ids + torch.randint(0, self.cfg.max_offset + 1, (idx.shape[0], 1), device=idx.device)
            x = self.tok(idx) + self.pos(ids) + self.seg(self.segments[start:end])
        if hasattr(self, "bias"):
            mask = self.bias[:, start:end, :end]
        elif start:  # new queries see every cached key and each other causally
            mask = torch.ones(T, end, dtype=torch.bool, device=idx.device).tril(start)
        else:
            mask = None
        if cache is not None and not cache:
            cache += [[] for _ in self.blocks]
        for i, block in enumerate(self.blocks):
            x = block(x, mask, None if cache is None else cache[i])
        return self.head(self.ln_f(x))


class LitGPT(L.LightningModule):
    """Trains a GPT on (tokens, loss_mask[, scale, source]) rows; warmup then cosine decay to a tenth of the peak.

    `scale` multiplies a row's loss: 1 for a target to imitate, a group-relative advantage for a sampled answer
    (negative pushes it down; its loss is capped so an already unlikely answer stops pulling). `source` names the
    row's data source by index, so the loss of each source can be followed.
    """

    def __init__(self, config: dict, learning_rate: float = 3e-3, warmup_steps: int = 50, max_steps: int = 1000):
        super().__init__()
        self.save_hyperparameters()
        self.model = GPT(GPTConfig(**config))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens)

    def training_step(self, batch, batch_idx):
        batch = trimmed(batch)
        loss, row_loss = batch_loss(self.model(batch[0].long()[:, :-1]), batch)  # rows are stored a byte per token
        self.log("train_loss", loss, prog_bar=True)
        return {"loss": loss, "row_loss": row_loss.detach(), "source": batch[3] if len(batch) > 3 else None}

    def configure_optimizers(self):
        hp = self.hparams
        return adamw_warmup_cosine(self.parameters(), hp.learning_rate, hp.warmup_steps, hp.max_steps)
