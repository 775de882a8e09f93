"""Both recipes keep the recipe contract (tests/recipe_contract.py); RMI_RECIPE_UNDER_TEST adds your own."""

import os

import pytest
import recipe_contract as contract

from rmi_pipeline.recipes.base import load_recipe
from rmi_pipeline.settings import DEFAULT_RECIPE

RECIPES = [DEFAULT_RECIPE, "rmi_pipeline.recipes.words:WordsRecipe",
           *filter(None, [os.environ.get("RMI_RECIPE_UNDER_TEST")])]


@pytest.fixture(scope="module", params=RECIPES)
def recipe_and_model(request):
    recipe = load_recipe(request.param)
    return recipe, recipe.build_model(learning_rate=1e-3, max_steps=30)


def test_tasks_slices_and_the_verifier(recipe_and_model):
    contract.check_tasks(recipe_and_model[0])


def test_batch_forms_agree_with_the_per_row_functions(recipe_and_model):
    contract.check_batch_forms(recipe_and_model[0])


def test_training_rows(recipe_and_model):
    contract.check_rows(*recipe_and_model)


def test_answers_training_checkpoints_and_mlflow_loading(recipe_and_model, tmp_path):
    contract.check_model(*recipe_and_model, tmp_path)
