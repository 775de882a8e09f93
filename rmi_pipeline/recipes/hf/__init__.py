"""Bring a Hugging Face causal LM: the model half of a recipe (recipe.py), its Lightning module, a local tiny model."""

from .recipe import HFOptions, HFRecipe

__all__ = ["HFOptions", "HFRecipe"]
