"""A causal LM and its tokenizer, to answer with: what HFRecipe.load_model gives (serving, evaluation, an MLflow
client), without the LightningModule that trains it (hf/model.py), so such a process never imports Lightning."""

import torch


class Answering(torch.nn.Module):
    def __init__(self, model, tokenizer):
        super().__init__()
        self.model, self.tokenizer = model, tokenizer
