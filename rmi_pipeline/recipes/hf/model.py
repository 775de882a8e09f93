"""A transformers causal LM inside a LightningModule, trained on the loop's rows like the default model.

Rows are right-padded (tokens, loss_mask[, scale, source[, teacher[, kto[, dpo]]]]) as ml/train.fit hands them
out: the loss is on the masked answer tokens only (ml/objective.py), so padding never counts and needs no attention
mask. With LoRA (peft) only the adapters train: the optimizer sees only the parameters that require a gradient.
"""

from __future__ import annotations

import lightning as L
import torch

from ...ml.distill import Distillation
from ...ml.objective import DPOReference, KTOReference, adamw_warmup_cosine, batch_loss, trimmed


class LitCausalLM(L.LightningModule):
    """`model`: an AutoModelForCausalLM, or a peft model around one; `tokenizer` travels with it."""

    def __init__(self, model, tokenizer, learning_rate: float = 1e-3, warmup_steps: int = 50,
                 max_steps: int = 1000):
        super().__init__()
        self.model, self.tokenizer = model, tokenizer
        self.learning_rate, self.warmup_steps, self.max_steps = learning_rate, warmup_steps, max_steps
        self.teacher: torch.Tensor | None = None  # set by the training program for token-level distillation
        self.kto: KTOReference | None = None  # and for KTO rows
        self.dpo: DPOReference | None = None  # and for DPO pairs
        self.distill: Distillation | None = None  # and for a teacher's distributions (ml/distill.py)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens).logits

    def training_step(self, batch, batch_idx):
        batch = trimmed(batch)
        loss, row_loss = batch_loss(self(batch[0].long()[:, :-1]), batch, self.teacher, self.kto, self, self.dpo,
                                    self.distill)
        self.log("train_loss", loss, prog_bar=True)
        return {"loss": loss, "row_loss": row_loss.detach(), "source": batch[3] if len(batch) > 3 else None}

    def configure_optimizers(self):
        return adamw_warmup_cosine(self.parameters(), self.learning_rate, self.warmup_steps, self.max_steps)
