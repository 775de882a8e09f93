"""Every recipe keeps the recipe contract (rmi_pipeline/testing/recipe_contract.py, `rmi check-recipe`) in both
modes: arithmetic and words with their capabilities, and a text recipe that is only a model; RMI_RECIPE_UNDER_TEST
adds your own. A capability left out is asked of no one, and its methods say so when called."""

import os
import random
import subprocess
import sys

import pytest

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.recipes.base import CAPABILITIES, MissingCapability, Recipe, load_recipe
from rmi_pipeline.recipes.completion import Completion
from rmi_pipeline.settings import DEFAULT_RECIPE
from rmi_pipeline.testing.recipe_contract import (
    CHECKS,
    PLAIN_QUESTIONS,
    ContractBroken,
    Subject,
    applies,
    check_answers,
)

TEXT = "rmi_pipeline.recipes.hf.text:TextRecipe"
RECIPES = [DEFAULT_RECIPE, "rmi_pipeline.recipes.words:WordsRecipe", TEXT,
           *filter(None, [os.environ.get("RMI_RECIPE_UNDER_TEST")])]
CASES = [pytest.param(path, check, id=f"{path.rpartition(':')[2]}: {check.capability or 'core'}: {check.name}")
         for path in RECIPES for check in CHECKS if applies(check, load_recipe(path))]


@pytest.fixture(scope="module")
def tiny_text_model(tmp_path_factory):
    """A small Llama with a tokenizer trained on plain questions, saved as a team's model would be."""
    from rmi_pipeline.recipes.hf.tiny import write_tiny_model

    path = tmp_path_factory.mktemp("text-model")
    write_tiny_model(path, [f"{q}\n{a}" for q, a in PLAIN_QUESTIONS] * 4, vocab_size=300,
                     architecture={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                   "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 512})
    return path


@pytest.fixture(scope="module")
def subjects(request, tmp_path_factory):
    """Each recipe under check with its model, built once (the text recipe's from RMI_HF_MODEL)."""
    made: dict[str, Subject] = {}

    def subject(path: str) -> Subject:
        if path not in made:
            with pytest.MonkeyPatch.context() as mp:
                if path == TEXT:
                    mp.setenv("RMI_HF_MODEL", str(request.getfixturevalue("tiny_text_model")))
                made[path] = Subject(load_recipe(path), tmp_path_factory.mktemp("contract"))
                made[path].module  # noqa: B018 - built while RMI_HF_MODEL is set
        return made[path]
    return subject


@pytest.mark.parametrize("path,check", CASES)
def test_the_recipe_keeps_the_contract(subjects, path, check):
    check.run(subjects(path))


def test_a_recipe_that_is_only_a_model_has_one_slice_and_no_capability_but_its_backbone():
    recipe = load_recipe(TEXT)
    # a Hugging Face model has hidden states for a reward model's head (HFRecipe.hidden_states), and HFRecipe.hint
    assert recipe.capabilities == {"backbone"} and recipe.written_capabilities() == {"hints", "backbone"}
    assert recipe.slice_of("How do I return a parcel?") == ("all", 1) and recipe.skills == ("all",)
    assert set(recipe.skipped()) == set(CAPABILITIES) - {"backbone"}
    assert recipe.skipped()["verifier"] == ("skipped: the text recipe has no verifier, so RL, hints and practice are "
                                            "off and the loop learns from users' feedback (and a judge) only")
    # hints are written (HFRecipe's) but build on a verifier's critiques: skipped, saying which is missing
    assert recipe.skipped()["hints"].startswith("skipped: the text recipe has no verifier, so the champion gets no")
    with pytest.raises(MissingCapability, match="verify is part of the verifier capability, and the text recipe has "
                                                "no verifier") as raised:
        recipe.verify("How do I return a parcel?", "Send it back.")
    assert (raised.value.capability, raised.value.recipe) == ("verifier", "text")
    for call in (lambda: recipe.sample_tasks(random.Random(0), 1, ["all"], [1]),
                 lambda: recipe.seed_tasks(random.Random(0)), lambda: recipe.is_private_slice("all", 1, 10),
                 lambda: recipe.build_eval_suite(random.Random(0), 10)):
        with pytest.raises(MissingCapability, match="generator capability"):
            call()
    assert recipe.checks("a", "b") == [] and recipe.route("a", random.Random(0)) is None  # their natural nothing
    with pytest.raises(ValueError, match="no capability 'verfier'"):
        recipe.has("verfier")


def test_the_text_recipe_reads_any_text_and_says_where_its_model_comes_from(monkeypatch):
    monkeypatch.delenv("RMI_HF_MODEL", raising=False)
    recipe = load_recipe(TEXT)
    assert recipe.is_valid_prompt("Où est la gare ?") and not recipe.is_valid_prompt(" \n")
    assert not recipe.is_valid_prompt("x" * 4001) and not recipe.is_valid_completion("y" * 2001)
    assert recipe.canonical("  Ｗhat IS\tthe  ﬁle?\n") == recipe.canonical("what is the file?") == "what is the file?"
    with pytest.raises(RuntimeError, match="set RMI_HF_MODEL to your model's directory"):
        recipe.build_model(1e-3, 10)


def test_every_capability_of_arithmetic_and_a_capability_dropped_by_assigning_the_base_method():
    # its verifier is the exact check: there is nothing stricter to audit it with
    assert ArithmeticRecipe().capabilities == set(CAPABILITIES) - {"variants", "audit"}

    class Unverified(ArithmeticRecipe):
        verify = Recipe.verify

    recipe = Unverified()
    assert not recipe.has("verifier") and not recipe.has("hints") and recipe.has("self_checks")
    with pytest.raises(MissingCapability):
        recipe.verify("1+2=", "3")


class HalfAGenerator(ArithmeticRecipe):
    """Draws tasks but writes no seed set: the generator capability is not whole."""

    seed_tasks = Recipe.seed_tasks


def test_check_recipe_prints_each_check_and_fails_a_recipe_that_breaks_the_contract(capsys):
    from rmi_pipeline.cli.main import main

    assert main(["check-recipe", f"{__name__}:HalfAGenerator", "--no-model"]) == 1
    out = capsys.readouterr().out
    assert "  ok    core: the batch forms agree with the per-row functions" in out
    assert ("  FAIL  core: its capabilities are whole: the recipe writes sample_tasks (generator) but not seed_tasks: "
            "the loop would use the generator capability and meet the base's default there") in out
    assert ("  FAIL  generator: tasks in their slices, the seed set, the eval suite: MissingCapability: seed_tasks "
            "is part of the generator capability, which the arithmetic recipe writes only in part") in out
    assert "  ok    verifier: the verifier accepts right answers and critiques wrong ones" in out
    assert out.rstrip().splitlines()[-1].endswith(" failed") and " 0 failed" not in out
    assert main(["check-recipe", "no.such.module:Recipe"]) == 2  # a path that names no recipe: one line


class CompletesOtherwise(ArithmeticRecipe):
    """Answers a client's plain call otherwise than `answer`, as a recipe whose own decoding drifted would."""

    def complete(self, model, prompts, decoding):
        return [Completion(c.text + "0", c.tokens + 1, c.finish_reason)
                for c in super().complete(model, prompts, decoding)]


def test_a_recipe_whose_complete_answers_otherwise_than_answer_fails_the_answers_check(tmp_path):
    """The gateway answers an OpenAI client's plain call with `complete`: it must be what the evals measured."""
    subject = Subject(CompletesOtherwise(), tmp_path)
    with pytest.raises(ContractBroken, match="complete with the default options answers as answer does"):
        check_answers(subject)
    check_answers(Subject(ArithmeticRecipe(), tmp_path))  # the recipe it derives from keeps it


def test_check_recipe_runs_where_pytest_is_not_installed():
    code = ("import sys; sys.modules['pytest'] = None; from rmi_pipeline.cli.main import main; "
            "sys.exit(main(['check-recipe', 'rmi_pipeline.recipes.arithmetic:ArithmeticRecipe', '--no-model']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "  ok    verifier: the verifier accepts right answers and critiques wrong ones" in out.stdout
