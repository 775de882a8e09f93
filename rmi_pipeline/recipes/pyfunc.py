"""A registered model version as an MLflow model: the recipe's checkpoint behind MLflow's pyfunc interface.

Any MLflow client with this package installed answers prompts with it (`mlflow.pyfunc.load_model(
"models:/NAME@champion")`, `mlflow models serve`). The model directory holds the checkpoint and the recipe's import
path as data, and names this module as its loader: loading imports our code and reads weights with
`weights_only=True`; nothing in the model directory is unpickled.
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
            signature=ModelSignature(Schema([ColSpec("string", INPUT)]), Schema([ColSpec("string", OUTPUT)])),
            input_example=pd.DataFrame({INPUT: [load_recipe(recipe_path).example_prompt()]}),
            pip_requirements=[f"rmi-pipeline=={__version__}"])  # given: inferring them loads the model twice


class Answerer:
    """What `load_model` returns (wrapped by MLflow): a DataFrame of prompts in, one of completions out."""

    def __init__(self, recipe, model):
        self.recipe, self.model = recipe, model

    def predict(self, model_input, params=None):
        import pandas as pd

        prompts = [str(p) for p in model_input[INPUT]]
        return pd.DataFrame({OUTPUT: self.recipe.answer(self.model, prompts)})


def _load_pyfunc(data_path: str) -> Answerer:
    """MLflow's entry point for a `loader_module`."""
    from .base import load_recipe

    data = Path(data_path)
    recipe = load_recipe(json.loads((data / RECIPE_FILE).read_text())["recipe"])
    return Answerer(recipe, recipe.load_model((data / CHECKPOINT_FILE).read_bytes()))
