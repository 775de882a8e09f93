"""A registered model version as an MLflow model: the recipe's checkpoint behind MLflow's pyfunc interface.

Any MLflow client with this package installed answers prompts with it (`mlflow.pyfunc.load_model(
"models:/NAME@champion")`, `mlflow models serve`). The model directory holds the checkpoint and the recipe's import
path as data, and names this module as its loader: loading imports our code and reads weights with
`weights_only=True`; nothing in the model directory is unpickled.

Its input is one column of strings, unnamed in the signature, so that MLflow hands over what a client passes: a
DataFrame (its `prompt` column, else its first), a list of strings, or one string.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

CHECKPOINT_FILE = "checkpoint.pt"
RECIPE_FILE = "recipe.json"
DATA = "data/checkpoint"  # where save_model puts the data folder, inside the model directory
INPUT, OUTPUT = "prompt", "completion"


def save(path: Path, recipe_path: str, checkpoint: bytes) -> None:
    """Write an MLflow model directory at `path` (which must not exist)."""
    import mlflow
    import pandas as pd
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    from .. import __version__
    from .base import load_recipe

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / Path(DATA).name
        data.mkdir()
        (data / CHECKPOINT_FILE).write_bytes(checkpoint)
        (data / RECIPE_FILE).write_text(json.dumps({"recipe": recipe_path}))
        mlflow.pyfunc.save_model(
            str(path), loader_module=__name__, data_path=str(data),
            # a named input column would make MLflow refuse a list or a string before predict sees it
            signature=ModelSignature(Schema([ColSpec("string")]), Schema([ColSpec("string", OUTPUT)])),
            input_example=pd.DataFrame({INPUT: [load_recipe(recipe_path).example_prompt()]}),
            pip_requirements=[f"rmi-pipeline=={__version__}"])  # given: inferring them loads the model twice


class Answerer:
    """What `load_model` returns (wrapped by MLflow): prompts in (a DataFrame, a list of strings or one string), a
    DataFrame of completions out, one row per prompt."""

    def __init__(self, recipe, model):
        self.recipe, self.model = recipe, model

    def predict(self, model_input, params=None):
        import pandas as pd

        return pd.DataFrame({OUTPUT: self.recipe.answer(self.model, prompts_of(model_input))})


def prompts_of(model_input) -> list[str]:
    """The prompts in what a client passed: a DataFrame's `prompt` column (else its first), a Series, a dict with a
    `prompt` list, a list or array of strings, or one string."""
    import pandas as pd

    if isinstance(model_input, str):
        return [model_input]
    if isinstance(model_input, pd.DataFrame):
        model_input = model_input[INPUT] if INPUT in model_input.columns else model_input.iloc[:, 0]
    elif isinstance(model_input, dict):
        model_input = model_input[INPUT]
    if isinstance(model_input, str):
        return [model_input]
    # MLflow makes a dict of lists a DataFrame of one row whose cell holds the list
    return [str(p) for value in model_input for p in (value if _listlike(value) else [value])]


def _listlike(value) -> bool:
    return not isinstance(value, str) and hasattr(value, "__iter__")


def _load_pyfunc(data_path: str) -> Answerer:
    """MLflow's entry point for a `loader_module`."""
    from .base import load_recipe

    data = Path(data_path)
    recipe = load_recipe(json.loads((data / RECIPE_FILE).read_text())["recipe"])
    return Answerer(recipe, recipe.load_model((data / CHECKPOINT_FILE).read_bytes()))
