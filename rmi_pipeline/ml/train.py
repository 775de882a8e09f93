"""Fit a LightningModule on weighted (tokens, loss_mask) rows, bounded by steps and by wall time.

Rows are drawn with replacement by weight, so a dataset can say "half of every batch from new
feedback" without copying rows. The time bound keeps a cycle short when the CPUs are shared.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler


@dataclass
class FitResult:
    steps: int
    seconds: float
    final_loss: float
    stopped_by_time: bool


class _Progress(L.Callback):
    """Reports (step, total, loss) about twenty times per fit, and keeps a running mean of the loss."""

    def __init__(self, total: int, report: Callable[[int, int, float], None] | None):
        self.total, self.report = total, report
        self.every = max(1, total // 20)
        self.recent: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.recent = (self.recent + [float(outputs["loss"])])[-50:]
        step = trainer.global_step
        if self.report and (step % self.every == 0 or step == self.total):
            self.report(step, self.total, sum(self.recent) / len(self.recent))


def fit(
    module: L.LightningModule,
    tokens: torch.Tensor,
    loss_mask: torch.Tensor,
    weights: torch.Tensor | None = None,
    *,
    max_steps: int,
    max_seconds: float,
    batch_size: int = 64,
    seed: int = 0,
    trainer: dict | None = None,
    loggers: list | None = None,
    report: Callable[[int, int, float], None] | None = None,
) -> FitResult:
    if len(tokens) == 0:
        raise ValueError("cannot train on an empty dataset")
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="lightning")
    L.seed_everything(seed, workers=True, verbose=False)
    weights = torch.ones(len(tokens)) if weights is None else weights.double()
    generator = torch.Generator().manual_seed(seed)
    sampler = WeightedRandomSampler(weights, num_samples=max_steps * batch_size, replacement=True,
                                    generator=generator)
    loader = DataLoader(TensorDataset(tokens, loss_mask), batch_size=batch_size, sampler=sampler)
    progress = _Progress(max_steps, report)
    trainer = L.Trainer(
        max_steps=max_steps,
        max_time=timedelta(seconds=max_seconds),
        **{"accelerator": "auto", "devices": 1, **(trainer or {})},
        logger=loggers or False,
        callbacks=[progress],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=max(1, max_steps // 50),
    )
    started = time.perf_counter()
    trainer.fit(module, loader)
    steps = trainer.global_step
    return FitResult(
        steps=steps,
        seconds=time.perf_counter() - started,
        final_loss=sum(progress.recent) / max(1, len(progress.recent)),
        stopped_by_time=steps < max_steps,
    )
