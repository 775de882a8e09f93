"""`rmi check-recipe`: check a team's recipe against the contract the loop relies on, a line per check.

    rmi check-recipe mypackage.recipe:MyRecipe [--examples cases.jsonl] [--no-model]

The checks are rmi_pipeline/testing/recipe_contract.py: the core for every recipe, each capability where the recipe
has it. Exit 0 when every check passes, 1 when one fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def check_recipe(
    recipe: Annotated[str, typer.Argument(help="The recipe's import path, package.module:ClassName (as RMI_RECIPE).")],
    examples: Annotated[Path | None, typer.Option(
        help="A JSONL file of `input` and `target` (an eval file's columns): the prompts a recipe with no task "
             "generator is asked and trained on (default: its public eval, else a few plain questions).")] = None,
    model: Annotated[bool, typer.Option(
        "--model/--no-model", help="Also build a model and check answering, training, checkpoints and MLflow "
                                   "loading (a minute); --no-model checks the text functions only (seconds).")] = True,
) -> int:
    """Check a recipe against the recipe contract: the core always, each capability it has; each check says what
    the loop would do wrong if it failed. Reads RMI_HF_MODEL and the recipe's own settings as the loop does."""
    from ..testing.recipe_contract import check_recipe as run_checks
    from .home import say

    return 0 if run_checks(recipe, examples=examples, model=model, say=say) else 1
