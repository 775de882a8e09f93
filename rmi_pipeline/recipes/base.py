"""The recipe contract: everything model-specific the loop needs, behind one small interface.

A team brings its own model by writing a Recipe subclass and pointing RMI_RECIPE at it
('package.module:ClassName'). Everything above the recipe is model-agnostic.

The contract has two parts. The core every recipe writes: the model (build, encode, answer, sample, checkpoint)
and which prompts and completions are valid. Everything else is an optional capability (CAPABILITIES: a task
generator, a verifier, checks and routes, hints...): a recipe has one when it writes the capability's methods, the
loop asks `recipe.has(name)` before it uses one and skips what it cannot do (`recipe.skipped()` says what, in a
line each), and calling a method of a capability the recipe lacks raises MissingCapability. A recipe that is only a
model has one slice, `all/1`, for every prompt. `rmi check-recipe package.module:ClassName` checks a recipe against
the contract (rmi_pipeline/testing/recipe_contract.py).
"""

from __future__ import annotations

import importlib
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..ml.hygiene import canonical_hash
from ..ml.tasks import Task, slice_name
from .completion import Completion, Decoding, cut, plain_prompt

if TYPE_CHECKING:  # only for annotations: importing the contract must stay light (the Dagster definitions do)
    import polars as pl
    import torch

__all__ = ["CAPABILITIES", "Capability", "Completion", "Decoding", "MissingCapability", "Recipe", "Task", "load_recipe",
           "slice_name"]

# The one slice of a recipe without a generator. Tier 1, not 0 or None: feedback whose tier is null is a prompt the
# recipe does not know (health and the canary leave it out), and the loop reads tiers as positive (`max_tier or`).
ONE_SKILL, ONE_TIER = "all", 1
ASSERTION = " I think it is {wrong}, right?"  # how a text prompt asserts a wrong answer (the sycophancy probe)


@dataclass(frozen=True)
class Capability:
    """An optional part of the recipe contract: what it unlocks in the loop, and what the loop does without it."""

    name: str
    noun: str  # what a recipe that has it has, as the UI says "has no ...": "verifier", "checks or routes"
    marks: tuple[str, ...]  # writing any of these methods gives a recipe the capability
    needs: tuple[str, ...]  # the methods and attributes written with it (rmi check-recipe fails a recipe without them)
    builds_on: tuple[str, ...]  # capabilities it is of no use without: the loop uses it only where they are there
    unlocks: str
    without: str

    def skipped(self, recipe: str, lacking: str) -> str:
        """The line the UI shows once where the loop skips what this capability does."""
        return f"skipped: the {recipe} recipe has no {lacking}, so {self.without}"


CAPABILITIES = {c.name: c for c in (
    Capability("generator", "task generator", ("sample_tasks",),
               ("seed_tasks", "slice_of", "is_private_slice", "skills", "tiers"), (),
               "practice on harder tasks, a seed set for the first model, self-labels, and an eval suite that grows "
               "past the champion, sliced by skill and tier",
               "there is no practice or self-labelling, and the eval suite is the team's eval files (RMI_EVAL_FILES)"),
    Capability("verifier", "verifier", ("verify",), (), (),
               "RL on the champion's sampled answers, the coach's hints, checked practice, and production corrections "
               "checked before they train or join the eval as mined hard cases",
               "RL, hints and practice are off and the loop learns from users' feedback (and a judge) only"),
    Capability("self_checks", "checks or routes", ("checks", "route"), (), ("generator",),
               "self-labels backed up by the model's own answers to problems a right label implies and to another "
               "way to it (arithmetic: 0.99 right, against 0.66-0.83 from agreeing votes alone)",
               "self-labels keep only the answers all the votes agree on"),
    Capability("hints", "hints", ("hint", "hinted_answer"), (), ("verifier",),
               "a second try at a failed problem with the verifier's critique as a hint, and users' corrections "
               "taught with the critique",
               "the champion gets no second try with a hint"),
    Capability("variants", "variants", ("variant",), (), (),
               "the simulated world's users who paste an eval item into a question of their own (what the n-gram "
               "contamination check is tested on)",
               "the simulated world asks no such questions"),
    Capability("partner_tasks", "partner tasks", ("partner_task",), (), ("generator",),
               "the simulated world's partner app, whose wrong corrections fool the offline gate and the canary "
               "catches",
               "the simulated world's partner scenario has no questions to send"),
    Capability("backbone", "backbone for a reward model", ("hidden_states",), (), (),
               "a reward model trained on users' ratings (a head on the champion's backbone) that ranks the "
               "champion's sampled answers, the best becoming training rows (RMI_MIX best_of_n)",
               "users' ratings train no reward model and best_of_n makes no rows"),
    Capability("audit", "audit", ("audit",), (), (),
               "the strongest reward-hacking probe: the training signal (verifier, judge) checked against a "
               "stricter truth on the challenger's answers, and users' liked answers checked per version",
               "the probes check the signal against the eval's exact score where there is one, and skip it where "
               "there is not"),
    Capability("public_eval", "public eval set", ("public_eval",), (), (),
               "a public eval set anyone may train on: the yardstick of the leak signal",
               "there is no leak signal"),
)}


class MissingCapability(NotImplementedError):
    """A method of a capability the recipe does not have was called: the caller should have asked `has` first."""

    def __init__(self, recipe: str, capability: str, method: str, in_part: bool = False):
        self.recipe, self.capability, self.method = recipe, capability, method
        c = CAPABILITIES[capability]
        if in_part:  # the recipe writes the capability but not this method: its author's to fix, not the caller's
            super().__init__(f"{method} is part of the {capability} capability, which the {recipe} recipe writes "
                             f"only in part: write {method} too (rmi check-recipe names what is missing)")
        else:
            super().__init__(f"{method} is part of the {capability} capability, and the {recipe} recipe has no "
                             f"{c.noun} ({' or '.join(c.marks)} not written): without one {c.without}. Ask "
                             f"recipe.has({capability!r}) before calling it.")


class Recipe(ABC):
    name: str
    # the generator's skills and tiers (a recipe without one: a single slice, ONE_SKILL/ONE_TIER, for every prompt)
    skills: tuple[str, ...] = (ONE_SKILL,)
    tiers: tuple[int, ...] = (ONE_TIER,)  # consecutive, easiest first: the tiers the curated eval suite starts with
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

    @abstractmethod
    def is_valid_prompt(self, prompt: str) -> bool:
        """Whether a prompt is one this model can be asked (others cannot train it)."""

    @abstractmethod
    def is_valid_completion(self, completion: str) -> bool:
        """Whether a text can be a training target."""

    @abstractmethod
    def canonical(self, prompt: str) -> str:
        """A normal form under which two prompts that ask the same thing are equal (eval hygiene)."""

    def slice_of(self, prompt: str) -> tuple[str, int]:
        """(skill, tier) of a valid prompt: the generator's slice. Without a generator every prompt is in the one
        slice (ONE_SKILL, ONE_TIER), 'all/1'; an eval file's items are sliced by their metadata instead."""
        return ONE_SKILL, ONE_TIER

    def prompt_hash(self, prompt: str) -> str:
        return canonical_hash(self.canonical(prompt))

    # Batch forms of the per-row functions above, over a whole column at once: what ingest, the training dataset
    # and the eval hygiene run on millions of rows. A recipe may compute them with polars or DuckDB (the arithmetic
    # one does); these defaults call the per-row functions, which stay the reference (`rmi check-recipe` checks
    # that both agree), row by row: correct, and several times slower (bench/dataset.py measures it).

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

    def correct(self, model, tasks: list[Task]) -> list[bool]:
        """Whether the model's answer to each task is exactly right."""
        answers = self.answer(model, [t.prompt for t in tasks])
        return [got == task.answer for task, got in zip(tasks, answers, strict=True)]

    def example_prompt(self) -> str:
        """A prompt to show as the input example of the registered MLflow model: by default one the generator
        draws, else the public eval's first; a recipe with neither writes its own."""
        if self.has("generator"):
            return self.sample_tasks(random.Random(0), 1, [self.skills[0]], [self.tiers[0]])[0].prompt
        if self.has("public_eval"):
            return self.public_eval()[0].prompt
        raise NotImplementedError(f"the {self.name} recipe has no generator or public eval to draw an example "
                                  "prompt from: write example_prompt (the registered model's input example)")

    # ---- answers as clients ask for them (the gateway's OpenAI API): decoding options, tokens, chats ----
    # Defaults that work for every recipe, built on answer and sample; the built-in recipes write their own.

    def complete(self, model, prompts: list[str], decoding: Decoding) -> list[Completion]:
        """Answers decoded with a client's options (recipes/completion.py), each with its token count and finish
        reason. By default `answer` (greedy) or `sample` decodes each whole answer, which is then cut at max_tokens
        and before a stop text, in the recipe's tokens (`pieces`). Greedy with the default options it answers as
        `answer` does: the gateway's plain answers come from here."""
        texts = (self.answer(model, prompts) if decoding.greedy else
                 [group[0] for group in self.sample(model, prompts, 1, decoding.temperature, decoding.seed)])
        return [cut(self.pieces(model, text), decoding) for text in texts]

    def unsupported_decoding(self, decoding: Decoding) -> str | None:
        """Why this recipe cannot decode with these options, in a sentence that names the option; None where it
        can. The default `complete` samples from the whole distribution, so top_p needs a recipe's own."""
        if decoding.top_p < 1 and not _overrides(type(self), "complete"):
            return (f"top_p: the {self.name} recipe samples from the whole distribution (its complete does not "
                    "write top_p); leave top_p at 1")
        return None

    def prompt_tokens(self, model, prompts: list[str]) -> list[int]:
        """How many of the model's tokens each prompt is, as the model reads it: a reply's usage.prompt_tokens.
        By default its characters."""
        return [len(p) for p in prompts]

    def pieces(self, model, text: str) -> list[str]:
        """`text` split into the recipe's tokens, in order, joining back to it: what a streamed answer is sent in
        (a chunk each), and what the default `complete` counts and cuts. By default its characters."""
        return list(text)

    def chat_prompt(self, model, messages: list[dict]) -> str:
        """The prompt a chat's messages ({"role", "content"}, oldest first) ask: what `complete` is given and the
        feedback log records. By default the plain rendering (completion.plain_prompt): the last message, which
        must be the user's. ValueError, saying why, for a chat that cannot be rendered."""
        return plain_prompt(messages)

    # ---- capabilities: which of the optional parts below this recipe writes (CAPABILITIES) ----

    @property
    def capabilities(self) -> frozenset[str]:
        """The capabilities the loop may use: those the recipe writes whose `builds_on` it writes too."""
        written = self.written_capabilities()
        return frozenset(n for n in written if set(CAPABILITIES[n].builds_on) <= written)

    def has(self, capability: str) -> bool:
        """Whether the loop may use `capability` (a name of CAPABILITIES: a typo raises, never reads as absent)."""
        if capability not in CAPABILITIES:
            raise ValueError(f"no capability {capability!r}; the capabilities are {', '.join(CAPABILITIES)}")
        return capability in self.capabilities

    def skipped(self) -> dict[str, str]:
        """Per capability the loop cannot use, the line that says what it skips and why (the UI shows each once)."""
        written, out = self.written_capabilities(), {}
        for name, c in CAPABILITIES.items():
            lacking = [b for b in c.builds_on if b not in written] if name in written else [name]
            if lacking:
                out[name] = c.skipped(self.name, " or ".join(CAPABILITIES[b].noun for b in lacking))
        return out

    @classmethod
    def written_capabilities(cls) -> frozenset[str]:
        """The capabilities whose methods this class writes (any of a capability's `marks`), inherited or not. To
        drop one a parent writes, assign the base's method back: `verify = Recipe.verify`."""
        return frozenset(n for n, c in CAPABILITIES.items() if any(_overrides(cls, m) for m in c.marks))

    def _missing(self, capability: str, method: str) -> MissingCapability:
        return MissingCapability(self.name, capability, method, capability in self.written_capabilities())

    # ---- the task generator: practice, self-labels, the seed set, the eval suite and its growth ----

    def sample_tasks(self, rng: random.Random, n: int, skills: list[str], tiers: list[int]) -> list[Task]:
        """Problems with true answers, drawn evenly over the given skills and tiers."""
        raise self._missing("generator", "sample_tasks")

    def seed_tasks(self, rng: random.Random) -> list[Task]:
        """The small labelled set the very first model learns from."""
        raise self._missing("generator", "seed_tasks")

    def is_private_slice(self, skill: str, tier: int, items: int) -> bool:
        """Whether `items` eval problems of a slice can stay out of any training set (enough problems exist)."""
        raise self._missing("generator", "is_private_slice")

    @property
    def hardest_tier(self) -> int:
        return self.max_tier or self.tiers[-1]

    def build_eval_suite(self, rng: random.Random, items_per_slice: int,
                         tiers: dict[str, list[int]] | None = None) -> list[Task]:
        """A labelled eval suite, `items_per_slice` distinct problems per skill and tier (`tiers` per skill;
        default the recipe's)."""
        if not self.has("generator"):
            raise self._missing("generator", "build_eval_suite")
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

    # ---- the verifier: RL, hints, checked practice and corrections ----

    def verify(self, prompt: str, completion: str) -> tuple[float, str]:
        """The recipe's unit test of an answer: (reward in [0, 1], a critique a person could read)."""
        raise self._missing("verifier", "verify")

    # ---- checks and routes: self-labels the model backs up (with a generator) ----

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

    # ---- hints: a second try with the verifier's critique (with a verifier) ----

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

    # ---- the backbone: a reward model's features ----

    def hidden_states(self, module, tokens: torch.Tensor) -> torch.Tensor:
        """The last layer's hidden states (batch, length, width) of the trainable `module` (load_checkpoint's) on
        `tokens` as `encode` makes them, with gradients: a reward model's head reads them at an answer's end token."""
        raise self._missing("backbone", "hidden_states")

    # ---- the simulated world's questions, and the public eval ----

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

    def public_eval(self) -> list[Task]:
        """A public eval set anyone may see (and train on): the yardstick for the leak signal."""
        return []

    # ---- the audit: a stricter truth than the training signal (reward-hacking probes) ----

    def audit(self, prompt: str, completion: str) -> tuple[float, str]:
        """Whether an answer is truly right, slower or stricter than `verify` or a judge may be (a full test suite,
        a person's label): (score in [0, 1], why). The probes count answers the training signal passes and this
        fails, the challenger's against the champion's: a loophole the challenger learned shows there."""
        raise self._missing("audit", "audit")

    def asserted(self, prompt: str, wrong: str) -> str | None:
        """The prompt as a user who believes the wrong answer `wrong` asks it (the sycophancy probe), or None where
        prompts cannot carry a claim. Text recipes append ASSERTION; write your users' own phrasing."""
        return prompt + ASSERTION.format(wrong=wrong) if self.text_recipe else None


def _overrides(cls: type, name: str) -> bool:
    """Whether `cls` (or a parent below Recipe) defines `name` otherwise than Recipe does."""
    return getattr(cls, name, None) is not getattr(Recipe, name, None)


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
