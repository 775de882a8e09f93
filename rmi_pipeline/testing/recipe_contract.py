"""The recipe contract as checks: what the loop relies on from any recipe (rmi_pipeline/recipes/base.py).

    rmi check-recipe mypackage.recipe:MyRecipe [--examples cases.jsonl] [--no-model]

The core is checked for every recipe, each capability only where the recipe has it (Recipe.has), so a recipe that
is only a model passes as one with every capability does. Each check raises ContractBroken with what the loop would
do wrong; nothing here needs pytest (tests/test_recipe_contract.py runs the same checks as tests).

Checks ask questions of example tasks (prompts with right answers): the generator's where the recipe has one, else
the given ones (an eval file's `input` and `target`), else its public eval, else a few plain questions in English.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..recipes.base import CAPABILITIES, ONE_SKILL, ONE_TIER, Recipe, Task, load_recipe
from ..recipes.completion import Decoding

# what a model-only text recipe is asked when it is given no examples of its own
PLAIN_QUESTIONS = [
    ("What is the capital of France?", "Paris."), ("How many days are in a week?", "Seven."),
    ("What colour is a clear sky?", "Blue."), ("What do bees make?", "Honey."),
    ("Which planet do we live on?", "Earth."), ("What is two plus two?", "Four."),
    ("What is frozen water called?", "Ice."), ("How many legs does a spider have?", "Eight."),
    ("What is the opposite of hot?", "Cold."), ("Which animal says moo?", "A cow."),
    ("What do plants need from the sun?", "Light."), ("How many hours are in a day?", "Twenty-four."),
    ("What is the first letter of the alphabet?", "A."), ("Where do fish live?", "In water."),
    ("What do you call a baby dog?", "A puppy."), ("What season comes after winter?", "Spring."),
]
MODEL_STEPS = 30  # the fresh model's schedule, and the steps the training check takes


class ContractBroken(AssertionError):
    """A check failed; the message says what the loop would do wrong."""


def ensure(condition: object, message: str) -> None:
    """Raise ContractBroken with `message` unless `condition` (never stripped, as `assert` is under -O)."""
    if not condition:
        raise ContractBroken(message)


@dataclass
class Subject:
    """A recipe under check, the example tasks it is asked, and the model it builds (on first use)."""

    recipe: Recipe
    tmp: Path  # a folder the checks may write in
    given: list[Task] | None = None  # examples a person passed (an eval file's cases)
    _module: object = None
    _failed: bool = False  # build_model failed once: the later model checks say so in a word

    @property
    def module(self):
        """A fresh LightningModule from build_model, shared by the model checks."""
        if self._failed:
            raise ContractBroken("build_model failed (above)")
        if self._module is None:
            try:
                self._module = self.recipe.build_model(learning_rate=1e-3, max_steps=MODEL_STEPS)
            except Exception as exc:  # noqa: BLE001 - a check's failure: the loop would fail the same way
                self._failed = True
                raise ContractBroken(f"build_model failed, so the loop could train no first model: {_said(exc)}") \
                    from exc
        return self._module

    def tasks(self, n: int = 256) -> list[Task]:
        """Up to `n` example tasks, the same on every call."""
        if self.recipe.has("generator"):
            return self.recipe.seed_tasks(random.Random(3))[:n]
        if self.given is not None:
            return self.given[:n]
        if self.recipe.has("public_eval"):
            return self.recipe.public_eval()[:n]
        return [Task(q, a, ONE_SKILL, ONE_TIER) for q, a in PLAIN_QUESTIONS][:n]


@dataclass(frozen=True)
class Check:
    name: str  # what a recipe that passes it can rely on
    capability: str | None  # None: every recipe (the core)
    needs_model: bool
    run: Callable[[Subject], None]


# ------------------------------------------------------------------------------------------------ the core


def check_capabilities(s: Subject) -> None:
    """Each capability a recipe writes is whole: the loop calls every method of one it has."""
    recipe = s.recipe
    ensure(isinstance(getattr(recipe, "name", None), str) and recipe.name,
           "a recipe has a `name`: the UI, the errors and the skipped-capability lines say it")
    for name in sorted(recipe.written_capabilities()):
        c = CAPABILITIES[name]
        missing = [m for m in c.needs if getattr(type(recipe), m, None) is getattr(Recipe, m, None)]
        ensure(not missing, f"the recipe writes {' or '.join(c.marks)} ({name}) but not {', '.join(missing)}: the "
               f"loop would use the {name} capability and meet the base's default there")


def check_examples(s: Subject) -> None:
    """The example tasks and the example prompt are ones the recipe accepts."""
    recipe = s.recipe
    for task in s.tasks():
        ensure(recipe.is_valid_prompt(task.prompt), f"an example prompt the recipe calls invalid: {task.prompt!r}"
               + ("" if s.given or recipe.has("generator") else ": pass your own with --examples FILE (JSONL with "
                  "`input` and `target`, as an eval file)"))
        ensure(task.answer is None or recipe.is_valid_completion(task.answer),
               f"a right answer the recipe calls an invalid completion: {task.answer!r} (to {task.prompt!r}); the "
               "loop would never train on it")
    ensure(recipe.is_valid_prompt(recipe.example_prompt()),
           "example_prompt must be a valid prompt: it is the registered model's input example")


def check_prompts(s: Subject) -> None:
    """canonical and slice_of are functions of the prompt, and every valid prompt is in a slice with a tier."""
    recipe = s.recipe
    for task in s.tasks(64):
        ensure(recipe.canonical(task.prompt) == recipe.canonical(task.prompt)
               and isinstance(recipe.canonical(task.prompt), str),
               f"canonical must give the same text for the same prompt ({task.prompt!r}): eval hygiene matches on it")
        skill, tier = recipe.slice_of(task.prompt)
        ensure(isinstance(skill, str) and skill and isinstance(tier, int) and tier >= 1,
               f"slice_of({task.prompt!r}) = {(skill, tier)}: a slice is a skill and a tier of 1 or more; feedback "
               "with no tier is left out of health and the canary")


def odd_texts(recipe: Recipe, tasks: list[Task], n: int = 2000) -> list[str | None]:
    """Prompts and answers of every slice, the same mangled (spaces, newlines, other scripts' digits, doubled or
    cut, very long), random characters of the recipe's own alphabet, and nothing at all."""
    rng = random.Random(4)
    texts: list[str | None] = [t.prompt for t in tasks] + [t.answer for t in tasks] + [None, "", " ", "\n"]
    alphabet = sorted({c for t in texts if t for c in t} | set(" \n٣３x"))
    for text in [t for t in texts if t][: n // 4]:
        cut = rng.randrange(len(text) + 1)
        texts += [text + "\n", " " + text, text[:cut], text[:cut] + rng.choice(alphabet) + text[cut:], text + text,
                  text.replace("1", "٣")]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(n // 4)]
    return texts + [text * (20_000 // len(text)) for text in [t for t in texts if t][:2]]


def check_batch_forms(s: Subject) -> None:
    """The batch forms (parse_prompts, valid_completions) give the per-row functions' answers on every row:
    ingest, the dataset and the eval hygiene run them, and a disagreement would let an eval item into training or
    file feedback under the wrong slice."""
    import polars as pl

    from ..ml.hygiene import canonical_hashes

    recipe = s.recipe
    tasks = (recipe.sample_tasks(random.Random(4), 500, list(recipe.skills), list(recipe.tiers))
             if recipe.has("generator") else s.tasks())
    texts = pl.Series(odd_texts(recipe, tasks), dtype=pl.String)
    parsed, answers = recipe.parse_prompts(texts), recipe.valid_completions(texts)
    ensure(parsed.height == answers.len() == texts.len(), "the batch forms give one row per text, in order")
    for text, answer, (valid, canonical, skill, tier) in zip(texts, answers, parsed.iter_rows(), strict=True):
        ok = text is not None and recipe.is_valid_prompt(text)
        ensure(valid == ok, f"parse_prompts says valid={valid} of {text!r}, is_valid_prompt {ok}")
        want = (recipe.canonical(text), *recipe.slice_of(text)) if ok else (None, None, None)
        ensure((canonical, skill, tier) == want, f"parse_prompts of {text!r}: {(canonical, skill, tier)} != {want}")
        ensure(answer == (text is not None and recipe.is_valid_completion(text)), f"valid_completions of {text!r}")
    hashes = canonical_hashes(parsed["canonical"]).to_list()
    ensure(hashes == [recipe.prompt_hash(t) if v else None for t, v in zip(texts, parsed["valid"], strict=True)],
           "prompt_hash must be the hash of canonical, as the batch hygiene computes it")


def check_rows(s: Subject) -> None:
    """Training rows are right-padded integer tokens with loss on the completion alone."""
    import torch

    recipe = s.recipe  # a generator's tasks of every slice: rows of many lengths
    tasks = (recipe.sample_tasks(random.Random(2), 8, list(recipe.skills), list(recipe.tiers))
             if recipe.has("generator") else s.tasks(8))
    tokens, mask = s.recipe.encode(s.module, [t.prompt for t in tasks], [t.answer for t in tasks])
    ensure(tokens.shape == mask.shape and len(tokens) == len(tasks), "encode gives one row per (prompt, completion)")
    ensure(not tokens.dtype.is_floating_point and mask.dtype == torch.bool,
           f"tokens are integers and the loss mask is bool, not {tokens.dtype} and {mask.dtype}")
    ensure(mask.any(1).all(), "every row has loss on its completion: a row without would train nothing")
    ensure(not mask[:, 0].any(), "the prompt carries no loss: the model would learn to write questions")
    for row in mask:  # the completion is one run of tokens: nothing after it trains (right padding)
        on = row.nonzero().squeeze(1)
        ensure((on == torch.arange(on[0], on[0] + len(on))).all(),
               "the loss is on one run of tokens (the completion), right-padded: padding would train")


def check_answers(s: Subject) -> None:
    """Answers are text, one per prompt; samples are `k` per prompt and the same for the same seed; with a client's
    default options `complete` answers as `answer` does, in `pieces` that join back to it."""
    recipe, prompts = s.recipe, [t.prompt for t in s.tasks(16)]
    answers = recipe.answer(s.module, prompts)
    ensure(len(answers) == len(prompts) and all(isinstance(a, str) for a in answers),
           "answer gives one string per prompt")
    groups = recipe.sample(s.module, prompts, 3, 0.7, seed=5)
    ensure([len(g) for g in groups] == [3] * len(prompts) and all(isinstance(a, str) for g in groups for a in g),
           "sample gives k strings per prompt: RL's groups and self-labelling's votes")
    ensure(groups == recipe.sample(s.module, prompts, 3, 0.7, seed=5),
           "the same seed samples the same answers: a retried cycle would see other data")
    ensure(all("".join(recipe.pieces(s.module, a)) == a for a in answers),
           "pieces join back to the answer: a streamed answer would read otherwise than the plain one")
    ensure([c.text for c in recipe.complete(s.module, prompts, Decoding())] == answers,
           "complete with the default options answers as answer does: a client of the OpenAI API would read other "
           "answers than the evals measured")
    ensure(all(c.tokens <= 1 for c in recipe.complete(s.module, prompts, Decoding(max_tokens=1))),
           "complete decodes at most max_tokens tokens: a client's limit would not hold")


def check_training(s: Subject) -> None:
    """A fit on the examples lowers the loss, and counts the tokens it trained on."""
    from ..ml.train import fit

    tasks = s.tasks()
    tasks = (tasks * (64 // len(tasks) + 1))[:max(64, len(tasks))]  # a few examples: each is seen several times
    tokens, mask = s.recipe.encode(s.module, [t.prompt for t in tasks], [t.answer for t in tasks])
    losses: list[float] = []
    result = fit(s.module, tokens, mask, max_steps=MODEL_STEPS, max_seconds=120, batch_size=16,
                 report=lambda step, total, loss: losses.append(loss))
    ensure(losses and losses[-1] < losses[0],
           f"training on the examples must lower the loss ({losses[0] if losses else None} -> "
           f"{losses[-1] if losses else None}): the loop would promote nothing")
    last_answer = mask.shape[1] - mask.flip(1).float().argmax(1)  # rows count up to their last answer token
    expected = result.steps * 16 * float(last_answer.double().mean())  # rows are drawn alike: their mean length
    ensure(abs(result.tokens - expected) < 0.05 * expected, f"tokens trained: {result.tokens} vs about {expected:.0f}")


def check_checkpoints(s: Subject) -> None:
    """A checkpoint answers as its model, loaded to train or to answer, and a warm start from it trains."""
    from ..ml.train import fit

    recipe, tasks = s.recipe, s.tasks(16)
    prompts = [t.prompt for t in tasks]
    data = recipe.checkpoint(s.module)
    ensure(isinstance(data, bytes), "checkpoint gives bytes: the registry stores them")
    want = recipe.answer(s.module, prompts)
    ensure(recipe.answer(recipe.load_checkpoint(data), prompts) == want,
           "a checkpoint answers as its model: the champion would change when it is loaded")
    model = recipe.load_model(data)  # what serving and evaluation answer with
    ensure(not model.training, "load_model gives a model in eval mode: dropout would change its answers")
    ensure(recipe.answer(model, prompts) == want, "load_model answers as the checkpoint's model: serving and "
           "evaluation would see another model than the one trained")
    warm = recipe.load_checkpoint(data, learning_rate=1e-3, max_steps=5)
    tokens, mask = recipe.encode(warm, prompts, [t.answer for t in tasks])
    fit(warm, tokens, mask, max_steps=5, max_seconds=60, batch_size=16)  # a candidate warm-starts from its champion


def check_mlflow(s: Subject) -> None:
    """A fresh process answers as the model through mlflow.pyfunc.load_model, as any MLflow client would."""
    from ..recipes import pyfunc

    recipe, prompts = s.recipe, [t.prompt for t in s.tasks(16)]
    recipe_path = f"{type(recipe).__module__}:{type(recipe).__name__}"
    folder = Path(tempfile.mkdtemp(dir=s.tmp)) / "model"  # pyfunc.save writes a folder that must not exist
    pyfunc.save(folder, recipe_path, recipe.checkpoint(s.module))
    loaded = subprocess.run(
        [sys.executable, "-c", "import json, sys, mlflow, pandas as pd; m = mlflow.pyfunc.load_model(sys.argv[1]); "
         "print(json.dumps(list(m.predict(pd.DataFrame({'prompt': sys.argv[2:]}))['completion'])))",
         str(folder), *prompts], capture_output=True, text=True, timeout=300)
    ensure(loaded.returncode == 0, f"mlflow.pyfunc.load_model failed in a fresh process: {loaded.stderr[-2000:]}")
    ensure(json.loads(loaded.stdout.strip().splitlines()[-1]) == recipe.answer(s.module, prompts),
           "the registered MLflow model answers otherwise than the model")


# ------------------------------------------------------------------------------------------ the capabilities


def check_generator(s: Subject) -> None:
    """Generated tasks are valid, in the slice asked for, with answers the label filter passes; the seed set
    trains; the eval suite's items are distinct."""
    recipe, rng = s.recipe, random.Random(0)
    ensure(recipe.skills and recipe.tiers, "a generator names its skills and tiers: the suite has a slice per pair")
    for skill in recipe.skills:
        for tier in recipe.tiers:
            for task in recipe.sample_tasks(rng, 5, [skill], [tier]):
                ensure(recipe.is_valid_prompt(task.prompt), f"sample_tasks made an invalid prompt {task.prompt!r}")
                ensure(recipe.is_valid_completion(task.answer), f"sample_tasks made an invalid true answer "
                       f"{task.answer!r}")
                ensure(recipe.slice_of(task.prompt) == (skill, tier),
                       f"slice_of({task.prompt!r}) must name the slice asked for, {(skill, tier)}")
                ensure(recipe.plausible(task.prompt, task.answer),
                       f"a true answer must pass the label filter (plausible): {task.answer!r} to {task.prompt!r}")
                ensure(isinstance(recipe.is_private_slice(skill, tier, 20), bool), "is_private_slice gives a bool")
    seed = recipe.seed_tasks(random.Random(0))
    ensure(seed and all(recipe.is_valid_prompt(t.prompt) and recipe.is_valid_completion(t.answer) for t in seed),
           "the seed set trains the first model: every row must be trainable")
    suite = recipe.build_eval_suite(random.Random(1), 20)
    ensure(len({recipe.canonical(t.prompt) for t in suite}) == len(suite), "eval items are distinct problems")


def _tasks_with_answers(s: Subject) -> Iterator[Task]:
    if s.recipe.has("generator"):
        rng = random.Random(0)
        for skill in s.recipe.skills:
            for tier in s.recipe.tiers:
                yield from s.recipe.sample_tasks(rng, 5, [skill], [tier])
    else:
        yield from (t for t in s.tasks() if t.answer is not None)


def check_verifier(s: Subject) -> None:
    """The verifier accepts a true answer and gives a wrong one a lower reward and a critique."""
    for task in _tasks_with_answers(s):
        reward, critique = s.recipe.verify(task.prompt, task.answer)
        ensure(reward == 1, f"the verifier must accept the true answer {task.answer!r} to {task.prompt!r} (got "
               f"{reward}): RL would push the model off right answers")
        reward, critique = s.recipe.verify(task.prompt, task.answer + " x")
        ensure(0 <= reward < 1 and isinstance(critique, str) and critique.strip(),
               f"a wrong answer gets a reward in [0, 1) and a critique (got {reward}, {critique!r}): hints read it")


def check_audit(s: Subject) -> None:
    """The audit passes a true answer and fails a wrong one, with a reason: the probes count where it and the
    training signal disagree."""
    for task in _tasks_with_answers(s):
        score, why = s.recipe.audit(task.prompt, task.answer)
        ensure(score == 1, f"the audit must pass the true answer {task.answer!r} to {task.prompt!r} (got {score}): "
               "every honest answer would read as a loophole")
        score, why = s.recipe.audit(task.prompt, task.answer + " x")
        ensure(0 <= score < 1 and isinstance(why, str) and why.strip(),
               f"a wrong answer gets an audit score in [0, 1) and a reason (got {score}, {why!r})")


def check_self_checks(s: Subject) -> None:
    """A right label's checks hold, and a route asks valid prompts."""
    recipe, rng = s.recipe, random.Random(0)
    for task in _tasks_with_answers(s):
        for check, expected in recipe.checks(task.prompt, task.answer):
            ensure(recipe.is_valid_prompt(check), f"a check asks a valid prompt, not {check!r}")
            if recipe.has("verifier"):
                ensure(recipe.verify(check, expected)[0] == 1,
                       f"a check of a right label must hold: {check!r} -> {expected!r} (from {task.prompt!r}); the "
                       "loop would throw right labels away")
        route = recipe.route(task.prompt, rng)
        ensure(route is None or all(recipe.is_valid_prompt(q) for q in route[0]),
               f"a route asks valid prompts (of {task.prompt!r}): {route[0] if route else None}")


def check_hints(s: Subject) -> None:
    """A hinted prompt is a valid prompt, and a second attempt gives a string or None per failed prompt."""
    recipe, tasks = s.recipe, s.tasks(16)
    prompts = [t.prompt for t in tasks]
    answers = recipe.answer(s.module, prompts)
    critiques = [recipe.verify(p, a)[1] for p, a in zip(prompts, answers, strict=True)]
    for prompt, critique in zip(prompts, critiques, strict=True):
        hinted = recipe.hint(prompt, critique)
        ensure(hinted is None or recipe.is_valid_prompt(hinted),
               f"a hinted prompt trains as a prompt, so it must be valid: {hinted!r}")
    again = recipe.hinted_answer(s.module, prompts, answers, critiques)
    ensure(len(again) == len(prompts) and all(h is None or isinstance(h, str) for h in again),
           "hinted_answer gives a string or None per prompt")


def check_variants(s: Subject) -> None:
    """A variant is a valid task with a right answer."""
    rng = random.Random(0)
    for task in _tasks_with_answers(s):
        other = s.recipe.variant(task, rng)
        if other is None:
            continue
        _valid_and_right(s, other, f"a variant of {task.prompt!r}")


def check_partner_tasks(s: Subject) -> None:
    """A partner's question is in the slice of the task it stands for, with a right answer and a wrong correction."""
    recipe, rng = s.recipe, random.Random(0)
    pairs = [(t, recipe.partner_task(t, rng)) for t in _tasks_with_answers(s)]
    ensure(any(p for _, p in pairs), "partner_task gave no question for any task: the partner scenario would be empty")
    for original, pair in pairs:
        if pair is None:
            continue
        task, correction = pair
        ensure((task.skill, task.tier) == (original.skill, original.tier) == recipe.slice_of(task.prompt),
               f"a partner's question is in the slice of the task asked for: {task} for {original}")
        ensure(not recipe.has("verifier") or (recipe.verify(task.prompt, task.answer)[0] == 1
                                              and recipe.verify(task.prompt, correction)[0] < 1),
               f"a partner's question has a right answer and a wrong correction: {task}, {correction!r}")


def check_public_eval(s: Subject) -> None:
    """The public eval's items are valid tasks with right answers."""
    items = s.recipe.public_eval()
    ensure(items, "public_eval gives items where the recipe writes it: the leak signal compares on them")
    for task in items:
        _valid_and_right(s, task, "a public eval item")


def _valid_and_right(s: Subject, task: Task, what: str) -> None:
    """`task` is a valid prompt and completion, and its answer right where the recipe has a verifier."""
    ensure(s.recipe.is_valid_prompt(task.prompt) and s.recipe.is_valid_completion(task.answer),
           f"{what} is a valid task: {task}")
    ensure(not s.recipe.has("verifier") or s.recipe.verify(task.prompt, task.answer)[0] == 1,
           f"{what} has a right answer: {task}")


def check_backbone(s: Subject) -> None:
    """Hidden states come per token of a row, with gradients, and depend on the answer: a head can learn from them."""
    import torch

    from ..ml.reward import last_answer_token

    recipe, tasks = s.recipe, s.tasks(4)
    prompts = [t.prompt for t in tasks]
    tokens, mask = recipe.encode(s.module, prompts, [t.answer for t in tasks])
    hidden = recipe.hidden_states(s.module, tokens.long())
    ensure(hidden.dim() == 3 and hidden.shape[:2] == tokens.shape and hidden.dtype.is_floating_point,
           f"hidden_states gives (rows, tokens, width) floats, not {tuple(hidden.shape)} {hidden.dtype}")
    ensure(hidden.requires_grad, "hidden_states keeps gradients: a reward model trains the backbone with its head")
    other, other_mask = recipe.encode(s.module, prompts, [t.answer for t in tasks[1:] + tasks[:1]])
    last = lambda h, m: h[torch.arange(len(m)), last_answer_token(m)]  # noqa: E731
    ensure(not torch.allclose(last(hidden, mask), last(recipe.hidden_states(s.module, other.long()), other_mask)),
           "an answer's last hidden state depends on the answer: a reward model would score every answer alike")


CHECKS = [
    Check("its capabilities are whole", None, False, check_capabilities),
    Check("its examples are valid prompts and completions", None, False, check_examples),
    Check("canonical and slice_of are functions of the prompt", None, False, check_prompts),
    Check("the batch forms agree with the per-row functions", None, False, check_batch_forms),
    Check("training rows: right-padded, loss on the completion", None, True, check_rows),
    Check("answers, seeded samples and a client's options", None, True, check_answers),
    Check("training lowers the loss", None, True, check_training),
    Check("checkpoints answer as their model; a warm start trains", None, True, check_checkpoints),
    Check("a fresh process answers the same through MLflow", None, True, check_mlflow),
    Check("tasks in their slices, the seed set, the eval suite", "generator", False, check_generator),
    Check("the verifier accepts right answers and critiques wrong ones", "verifier", False, check_verifier),
    Check("the audit passes right answers and fails wrong ones", "audit", False, check_audit),
    Check("checks of right labels hold; routes ask valid prompts", "self_checks", False, check_self_checks),
    Check("hinted prompts and second attempts", "hints", True, check_hints),
    Check("variants are valid tasks", "variants", False, check_variants),
    Check("partner questions in their slices", "partner_tasks", False, check_partner_tasks),
    Check("the public eval's items are valid tasks", "public_eval", False, check_public_eval),
    Check("hidden states a reward model's head can read", "backbone", True, check_backbone),
]


def applies(check: Check, recipe: Recipe) -> bool:
    """Whether `check` is asked of `recipe`: the core always, a capability where the loop may use it."""
    return check.capability is None or recipe.has(check.capability)


def read_examples(path: Path) -> list[Task]:
    """Example tasks from a JSONL file of `input` and `target` (an eval file's columns; `target` may be absent)."""
    tasks = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                tasks.append(Task(row["input"], row.get("target"), ONE_SKILL, ONE_TIER))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a JSON object with an `input`: {exc}") from exc
    if not tasks:
        raise ValueError(f"{path} holds no examples")
    return tasks


def check_recipe(import_path: str, *, examples: Path | None = None, model: bool = True,
                 say: Callable[[str], None] = print) -> bool:
    """Run every check that applies to the recipe at `import_path`, a line each; True when all pass."""
    recipe = load_recipe(import_path)
    given = read_examples(examples) if examples else None
    has = sorted(recipe.capabilities)
    say(f"{import_path}: the {recipe.name} recipe, capabilities: {', '.join(has) or 'none (a model only)'}")
    with tempfile.TemporaryDirectory(prefix="rmi-check-recipe-") as tmp:
        return _run(Subject(recipe, Path(tmp), given), model, say)


def _run(subject: Subject, model: bool, say: Callable[[str], None]) -> bool:
    recipe, failed, passed = subject.recipe, 0, 0
    for check in CHECKS:
        label = f"{check.capability or 'core'}: {check.name}"
        if not applies(check, recipe):
            say(f"  skip  {label} ({recipe.skipped()[check.capability].removeprefix('skipped: ')})")
            continue
        if check.needs_model and not model:
            say(f"  skip  {label} (--no-model)")
            continue
        try:
            check.run(subject)
        except Exception as exc:  # noqa: BLE001 - a recipe's own error is a failed check, reported with the others
            failed += 1
            say(f"  FAIL  {label}: {exc if isinstance(exc, ContractBroken) else _said(exc)}")
        else:
            passed += 1
            say(f"  ok    {label}")
    say(f"{passed} passed, {failed} failed")
    return not failed


def _said(exc: BaseException) -> str:
    """An unexpected error as one line: its type, message and the line that raised it."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    return f"{type(exc).__name__}: {exc}" + (f" (at {where.filename}:{where.lineno})" if where else "")
