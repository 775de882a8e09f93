"""Recipes: the plug-in point where a team brings its own model (see base.py)."""
