"""The LightningModule that trains a GPT (gpt.py), kept apart so that answering needs no Lightning.

The loss is taken only where `loss_mask` is set (the answer tokens), so prompts teach the model nothing it must
produce.
"""

from __future__ import annotations

import lightning as L
import torch

from ...ml.distill import Distillation
from ...ml.objective import DPOReference, KTOReference, adamw_warmup_cosine, batch_loss, trimmed
from .gpt import GPT, GPTConfig


class LitGPT(L.LightningModule):
    """Trains a GPT on (tokens, loss_mask[, scale, source[, teacher, kto, dpo]]) rows; warmup then cosine decay to a
    tenth of the peak.

    `scale` multiplies a row's loss: 1 for a target to imitate, a group-relative advantage for a sampled answer
    (negative pushes it down; its loss is capped so an already unlikely answer stops pulling). `source` names the
    row's data source by index, so the loss of each source can be followed. `kto` indexes the KTO reference of a
    thumbs-up or thumbs-down row, `dpo` the DPO reference of a pair (ml/objective.py); `distill`, when set, a teacher
    model's distributions on every imitated row (ml/distill.py).
    """

    def __init__(self, config: dict, learning_rate: float = 3e-3, warmup_steps: int = 50, max_steps: int = 1000):
        super().__init__()
        self.save_hyperparameters()
        self.model = GPT(GPTConfig(**config))
        self.kto: KTOReference | None = None  # set by the training program for KTO rows (ml/objective.py)
        self.dpo: DPOReference | None = None  # and for DPO pairs
        self.distill: Distillation | None = None  # and for a teacher's distributions (ml/distill.py)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens)

    def training_step(self, batch, batch_idx):
        batch = trimmed(batch)
        # rows are stored a byte per token
        loss, row_loss = batch_loss(self.model(batch[0].long()[:, :-1]), batch, kto=self.kto, policy=self.model,
                                    dpo=self.dpo, distill=self.distill)
        self.log("train_loss", loss, prog_bar=True)
        return {"loss": loss, "row_loss": row_loss.detach(), "source": batch[3] if len(batch) > 3 else None}

    def configure_optimizers(self):
        hp = self.hparams
        return adamw_warmup_cosine(self.parameters(), hp.learning_rate, hp.warmup_steps, hp.max_steps)
