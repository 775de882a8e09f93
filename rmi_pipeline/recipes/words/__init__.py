"""The text recipe: word-list tasks on a small Hugging Face causal LM, coached in words."""

from .recipe import WordsRecipe

__all__ = ["WordsRecipe"]
