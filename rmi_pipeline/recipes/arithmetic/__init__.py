"""The default recipe: reversed-digit addition and subtraction with a tiny transformer."""

from .recipe import ArithmeticRecipe

__all__ = ["ArithmeticRecipe"]
