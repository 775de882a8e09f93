"""Bring a Hugging Face causal LM: the model half of a recipe (recipe.py), its Lightning module, a local tiny model,
and a recipe that is only the model (text.py)."""

from .recipe import HFOptions, HFRecipe
from .text import TextRecipe

__all__ = ["HFOptions", "HFRecipe", "TextRecipe"]
