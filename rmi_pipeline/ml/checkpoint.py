"""A checkpoint as bytes: a model's config (what rebuilds it) and its weights, written and read without pickle.

The recipe decides what the config holds (Recipe.model_config); loading uses `weights_only=True`, so a checkpoint
file can carry tensors and plain values, never code.
"""

from __future__ import annotations

import io

import torch


def dumps(config: dict, state_dict: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save({"config": dict(config), "state_dict": state_dict}, buffer)
    return buffer.getvalue()


def loads(data: bytes) -> tuple[dict, dict]:
    """(config, state_dict) of a checkpoint written by `dumps`."""
    checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)  # never unpickle code
    return checkpoint["config"], checkpoint["state_dict"]
