"""The recipe contract: everything model-specific the loop needs, behind one small interface.

A team brings its own model by writing a Recipe subclass and pointing RMI_RECIPE at it
('package.module:ClassName'). Everything above the recipe is model-agnostic.
"""

from __future__ import annotations

import importlib
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..ml.hygiene import canonical_hash
from ..ml.tasks import Task, slice_name

if TYPE_CHECKING:  # only for annotations: importing the contract must stay light (the Dagster definitions do)
    import polars as pl
    import torch

__all__ = ["Recipe", "Task", "load_recipe", "slice_name"]


class Recipe(ABC):
    name: str
    skills: tuple[str, ...]
    tiers: tuple[int, ...]  # consecutive, easiest first: the tiers the curated eval suite starts with
    # the hardest tier sample_tasks can make (None: the last of `tiers`): practice, self-labels and the eval suite
    # grow up to it as the champion does
    max_tier: int | None = None
    text_recipe: bool = False  # free text: training is also checked for n-gram overlap with the evals
    ngram_n: int = 13  # of that check (RMI_EVAL_NGRAM_N): long enough that a shared phrase is shared content
    # "tokens" for hints in words (ml/objective.py); RMI_PRACTICE_HINT_DISTILLATION overrides the recipe's choice
    hint_distillation: str = "answers"

    @abstractmethod
    def build_model(self, learning_rate: float, max_steps: int, size: str = "tiny", config: dict | None = None):
        """A fresh LightningModule with random weights, of a named size (or the exact `config` of a checkpoint)."""

    def model_config(self, module) -> dict:
        """What rebuilds `module` with build_model(config=...): plain JSON-like values, saved with its weights by
        the default `checkpoint` (a recipe that writes its own checkpoints needs none)."""
        raise NotImplementedError(f"{type(self).__name__} writes no config-and-weights checkpoints")

    def checkpoint(self, module) -> bytes:
        """The module as a checkpoint file's bytes: its config and its weights (no pickled code)."""
        from ..ml import checkpoint

        return checkpoint.dumps(self.model_config(module), module.state_dict())

    def load_checkpoint(self, data: bytes, learning_rate: float = 0.0, max_steps: int = 1):
        """The module a checkpoint holds, rebuilt from its config (a fresh optimizer schedule of `max_steps`)."""
        from ..ml import checkpoint

        config, state_dict = checkpoint.loads(data)
        module = self.build_model(learning_rate, max_steps, config=config)
        module.load_state_dict(state_dict)
        return module

    def load_model(self, data: bytes) -> torch.nn.Module:
        """The model a checkpoint holds, in eval mode, to answer with (serving, evaluation, practice). By default
        load_checkpoint's module; a recipe may rebuild a lighter one that needs no training framework (the
        arithmetic recipe's bare GPT: a process that only answers never imports Lightning, 5-9 s of start-up)."""
        return self.load_checkpoint(data).eval()

    @abstractmethod
    def encode(self, module, prompts: Sequence[str], completions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Training rows for `module` (its tokenizer, where it has one): (tokens, loss_mask), right-padded, loss on
        the completion tokens only. Tokens may be any integer type: the smallest that holds the vocabulary keeps
        millions of rows small (the model casts a batch to int64). The training program hands over polars String
        Series (the dataset's columns), others lists: a recipe may encode either in bulk (the arithmetic one does,
        with no Python string per row)."""

    @abstractmethod
    def answer(self, model: torch.nn.Module, prompts: list[str]) -> list[str]:
        """Batched greedy completions, as a user would read them."""

    @abstractmethod
    def sample(self, model: torch.nn.Module, prompts: list[str], k: int, temperature: float,
               seed: int) -> list[list[str]]:
        """`k` sampled completions per prompt: the groups of RL and the votes of self-labelling."""

    def hint(self, prompt: str, critique: str) -> str | None:
        """The prompt with the coach's critique in it as words, for a model that reads hints; None (the default)
        for a recipe whose hints are not text."""
        return None

    def hinted_answer(self, model: torch.nn.Module, prompts: list[str], answers: list[str],
                      critiques: list[str]) -> list[str | None]:
        """A second attempt at each failed prompt with the coach's critique as a hint; None where the critique
        holds no usable hint. By default the hinted prompt (`hint`) is answered; a recipe may hint otherwise (the
        arithmetic one bans a digit while decoding)."""
        hinted = [self.hint(p, c) for p, c in zip(prompts, critiques, strict=True)]
        usable = [i for i, h in enumerate(hinted) if h is not None]
        out: list[str | None] = [None] * len(prompts)
        for i, text in zip(usable, self.answer(model, [hinted[i] for i in usable]) if usable else [], strict=True):
            out[i] = text
        return out

    def plausible(self, prompt: str, completion: str) -> bool:
        """Format and length filter on a label the model wrote itself (no ground truth involved)."""
        return self.is_valid_completion(completion)

    def checks(self, prompt: str, completion: str) -> list[tuple[str, str]]:
        """Problems whose answers follow from this one if `completion` is right, as (prompt, expected answer): the
        model checks a label it wrote by working back from it (a + b = c implies c - b = a). None by default."""
        return []

    def route(self, prompt: str, rng: random.Random) -> tuple[list[str], Callable[[list[str]], str | None]] | None:
        """Another way to the prompt's answer: questions for the model first, and a function that puts its answers
        together (as text, never by computing) into a last question with the same answer, or None if they cannot
        make one. A label the model wrote is kept only if it walks the route to it too: working back meets the
        model's own slips again, a route drawn afresh asks about other problems. None (no route) by default."""
        return None

    @abstractmethod
    def is_valid_prompt(self, prompt: str) -> bool:
        """Whether a prompt is one this model can be asked (others cannot train it)."""

    @abstractmethod
    def is_valid_completion(self, completion: str) -> bool:
        """Whether a text can be a training target."""

    @abstractmethod
    def slice_of(self, prompt: str) -> tuple[str, int]:
        """(skill, tier) of a valid prompt."""

    @abstractmethod
    def canonical(self, prompt: str) -> str:
        """A normal form under which two prompts that ask the same thing are equal (eval hygiene)."""

    # Batch forms of the four functions above, over a whole column at once: what ingest, the training dataset and
    # the eval hygiene run on millions of rows. A recipe may compute them with polars or DuckDB (the arithmetic
    # one does); these defaults call the per-row functions, which stay the reference (tests/recipe_contract.py
    # checks that both agree), row by row: correct, and several times slower (bench/dataset.py measures it).

    def parse_prompts(self, prompts: pl.Series) -> pl.DataFrame:
        """One row per prompt (a String Series, nulls allowed): `valid` (is_valid_prompt, never null), and where
        valid its `canonical`, `skill` and `tier`; nulls where not. A prompt the per-row functions trip on is not
        valid."""
        import polars as pl

        def one(prompt):
            try:
                if prompt is not None and self.is_valid_prompt(prompt):
                    return (True, self.canonical(prompt), *self.slice_of(prompt))
            except Exception:  # noqa: BLE001 - one odd prompt must not fail a batch of millions
                pass
            return False, None, None, None

        return pl.DataFrame([one(p) for p in prompts.to_list()], schema=parsed_prompts_schema(), orient="row")

    def valid_completions(self, completions: pl.Series) -> pl.Series:
        """is_valid_completion of each row of a String Series: Boolean, false for a null."""
        import polars as pl

        return pl.Series([c is not None and self.is_valid_completion(c) for c in completions.to_list()],
                         dtype=pl.Boolean)

    @abstractmethod
    def sample_tasks(self, rng: random.Random, n: int, skills: list[str], tiers: list[int]) -> list[Task]:
        """Problems with true answers, drawn evenly over the given skills and tiers."""

    @abstractmethod
    def seed_tasks(self, rng: random.Random) -> list[Task]:
        """The small labelled set the very first model learns from."""

    @abstractmethod
    def verify(self, prompt: str, completion: str) -> tuple[float, str]:
        """The recipe's unit test of an answer: (reward in [0, 1], a critique a person could read)."""

    @abstractmethod
    def is_private_slice(self, skill: str, tier: int, items: int) -> bool:
        """Whether `items` eval problems of a slice can stay out of any training set (enough problems exist)."""

    def variant(self, task: Task, rng: random.Random) -> Task | None:
        """Another problem on the same material as `task`, or None: the simulated world's users who paste an eval
        item's text into a question of their own (what the n-gram contamination check is for)."""
        return None

    def partner_task(self, task: Task, rng: random.Random) -> tuple[Task, str] | None:
        """A question of `task`'s skill and tier as a partner app's users ask it, and the wrong answer the app's
        buggy client sends as its correction; None where the recipe has none. The simulated world's scenario that
        fools the offline gate: such questions are rare in an eval drawn at random, so a model taught the wrong
        answers passes the gate and only live users show it worse (the canary)."""
        return None

    def example_prompt(self) -> str:
        """A prompt to show as the input example of the registered MLflow model."""
        return self.sample_tasks(random.Random(0), 1, [self.skills[0]], [self.tiers[0]])[0].prompt

    def public_eval(self) -> list[Task]:
        """A public eval set anyone may see (and train on): the yardstick for the leak signal."""
        return []

    @property
    def hardest_tier(self) -> int:
        return self.max_tier or self.tiers[-1]

    def build_eval_suite(self, rng: random.Random, items_per_slice: int,
                         tiers: dict[str, list[int]] | None = None) -> list[Task]:
        """A labelled eval suite, `items_per_slice` distinct problems per skill and tier (`tiers` per skill;
        default the recipe's)."""
        suite: list[Task] = []
        for skill in self.skills:
            for tier in (tiers or {}).get(skill, self.tiers):
                seen: dict[str, Task] = {}
                idle = 0  # draws in a row that found nothing new: a small slice has run out of distinct problems
                for _ in range(100):
                    before = len(seen)
                    for task in self.sample_tasks(rng, items_per_slice, [skill], [tier]):
                        seen.setdefault(self.canonical(task.prompt), task)
                    idle = idle + 1 if len(seen) == before else 0
                    if len(seen) >= items_per_slice or idle == 10:
                        break
                suite.extend(list(seen.values())[:items_per_slice])
        return suite

    def correct(self, model, tasks: list[Task]) -> list[bool]:
        """Whether the model's answer to each task is exactly right."""
        answers = self.answer(model, [t.prompt for t in tasks])
        return [got == task.answer for task, got in zip(tasks, answers, strict=True)]

    def prompt_hash(self, prompt: str) -> str:
        return canonical_hash(self.canonical(prompt))


def parsed_prompts_schema() -> dict:
    """The columns of Recipe.parse_prompts (polars is imported here: the contract's import stays light)."""
    import polars as pl

    return {"valid": pl.Boolean, "canonical": pl.String, "skill": pl.String, "tier": pl.Int64}


def load_recipe(import_path: str) -> Recipe:
    """Instantiate 'package.module:ClassName', with an error that says what is wrong."""
    module_name, _, class_name = import_path.partition(":")
    if not class_name:
        raise ValueError(f"RMI_RECIPE must look like 'package.module:ClassName', got {import_path!r}")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load recipe {import_path!r}: {exc}") from exc
    recipe = cls()
    if not isinstance(recipe, Recipe):
        raise TypeError(f"{import_path} is not a rmi_pipeline.recipes.base.Recipe")
    return recipe
