"""The recipe contract as tests: what the loop relies on from any recipe (rmi_pipeline/recipes/base.py).

Point it at your own recipe:

    RMI_RECIPE_UNDER_TEST=mypackage.recipe:MyRecipe python -m pytest tests/test_recipe_contract.py

Every check takes the recipe instance and a model built by it; each says in its message what the loop would do
wrong if the check failed.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import torch

from rmi_pipeline.ml.train import fit
from rmi_pipeline.recipes.base import Recipe


def check_tasks(recipe: Recipe) -> None:
    rng = random.Random(0)
    assert recipe.skills and recipe.tiers, "a recipe names its skills and tiers: the eval suite has a slice per pair"
    for skill in recipe.skills:
        for tier in recipe.tiers:
            for task in recipe.sample_tasks(rng, 5, [skill], [tier]):
                assert recipe.is_valid_prompt(task.prompt), f"sample_tasks made an invalid prompt {task.prompt!r}"
                assert recipe.is_valid_completion(task.answer), f"an invalid true answer {task.answer!r}"
                assert recipe.slice_of(task.prompt) == (skill, tier), "slice_of must name the slice asked for"
                assert recipe.verify(task.prompt, task.answer)[0] == 1, "the verifier must accept the true answer"
                assert recipe.plausible(task.prompt, task.answer), "a true answer must pass the label filter"
                reward, critique = recipe.verify(task.prompt, task.answer + " x")
                assert reward < 1 and critique.strip(), "a wrong answer gets a reward below 1 and a critique"
                assert recipe.canonical(task.prompt) == recipe.canonical(task.prompt)
                for check, expected in recipe.checks(task.prompt, task.answer):
                    assert recipe.verify(check, expected)[0] == 1, "a check of a right label must hold"
                route = recipe.route(task.prompt, rng)
                assert route is None or all(recipe.is_valid_prompt(q) for q in route[0]), "a route asks valid prompts"
    seed = recipe.seed_tasks(random.Random(0))
    assert seed and all(recipe.is_valid_prompt(t.prompt) and recipe.is_valid_completion(t.answer) for t in seed), \
        "the seed set trains the first model: every row must be trainable"
    suite = recipe.build_eval_suite(random.Random(1), 20)
    assert len({recipe.canonical(t.prompt) for t in suite}) == len(suite), "eval items are distinct problems"
    assert recipe.is_valid_prompt(recipe.example_prompt())


def odd_texts(recipe: Recipe, n: int = 2000) -> list[str | None]:
    """Prompts and answers of every slice, the same mangled (spaces, newlines, other scripts' digits, doubled or
    cut), random characters of the recipe's own alphabet, and nothing at all."""
    rng = random.Random(4)
    tasks = recipe.sample_tasks(rng, n // 4, list(recipe.skills), list(recipe.tiers))
    texts: list[str | None] = [t.prompt for t in tasks] + [t.answer for t in tasks] + [None, "", " ", "\n"]
    alphabet = sorted({c for t in texts if t for c in t} | set(" \n٣３x"))
    for text in [t for t in texts if t][: n // 4]:
        cut = rng.randrange(len(text) + 1)
        texts += [text + "\n", " " + text, text[:cut], text[:cut] + rng.choice(alphabet) + text[cut:], text + text,
                  text.replace("1", "٣")]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(n // 4)]
    return texts


def check_batch_forms(recipe: Recipe) -> None:
    """The batch forms (parse_prompts, valid_completions) give the per-row functions' answers on every row:
    ingest, the dataset and the eval hygiene run them, and a disagreement would let an eval item into training or
    file feedback under the wrong slice."""
    import polars as pl

    from rmi_pipeline.ml.hygiene import canonical_hashes

    texts = pl.Series(odd_texts(recipe), dtype=pl.String)
    parsed, answers = recipe.parse_prompts(texts), recipe.valid_completions(texts)
    assert parsed.height == answers.len() == texts.len(), "one row per text, in order"
    for text, answer, (valid, canonical, skill, tier) in zip(texts, answers, parsed.iter_rows(), strict=True):
        ok = text is not None and recipe.is_valid_prompt(text)
        assert valid == ok, f"parse_prompts says valid={valid} of {text!r}, is_valid_prompt {ok}"
        want = (recipe.canonical(text), *recipe.slice_of(text)) if ok else (None, None, None)
        assert (canonical, skill, tier) == want, f"parse_prompts of {text!r}: {(canonical, skill, tier)} != {want}"
        assert answer == (text is not None and recipe.is_valid_completion(text)), f"valid_completions of {text!r}"
    hashes = canonical_hashes(parsed["canonical"]).to_list()
    assert hashes == [recipe.prompt_hash(t) if v else None for t, v in zip(texts, parsed["valid"], strict=True)]


def check_rows(recipe: Recipe, module) -> None:
    tasks = recipe.sample_tasks(random.Random(2), 8, list(recipe.skills), list(recipe.tiers))
    tokens, mask = recipe.encode(module, [t.prompt for t in tasks], [t.answer for t in tasks])
    assert tokens.shape == mask.shape and len(tokens) == len(tasks), "one row per (prompt, completion)"
    assert not tokens.dtype.is_floating_point and mask.dtype == torch.bool
    assert mask.any(1).all(), "every row has loss on its completion"
    assert not mask[:, 0].any(), "the prompt carries no loss"
    for row in mask:  # the completion is one run of tokens: nothing after it trains (right padding)
        on = row.nonzero().squeeze(1)
        assert (on == torch.arange(on[0], on[0] + len(on))).all()


def check_model(recipe: Recipe, module, tmp: Path) -> None:
    tasks = recipe.seed_tasks(random.Random(3))[:256]
    prompts = [t.prompt for t in tasks[:16]]
    answers = recipe.answer(module, prompts)
    assert len(answers) == len(prompts) and all(isinstance(a, str) for a in answers)
    groups = recipe.sample(module, prompts, 3, 0.7, seed=5)
    assert [len(g) for g in groups] == [3] * len(prompts)
    assert groups == recipe.sample(module, prompts, 3, 0.7, seed=5), "the same seed samples the same answers"
    critiques = [recipe.verify(p, a)[1] for p, a in zip(prompts, answers, strict=True)]
    hinted = recipe.hinted_answer(module, prompts, answers, critiques)
    assert len(hinted) == len(prompts) and all(h is None or isinstance(h, str) for h in hinted)

    tokens, mask = recipe.encode(module, [t.prompt for t in tasks], [t.answer for t in tasks])
    losses = []
    result = fit(module, tokens, mask, max_steps=30, max_seconds=120, batch_size=16,
                 report=lambda step, total, loss: losses.append(loss))
    assert losses[-1] < losses[0], "training on the seed set lowers the loss"
    last_answer = mask.shape[1] - mask.flip(1).float().argmax(1)  # rows count up to their last answer token
    expected = result.steps * 16 * float(last_answer.double().mean())  # rows are drawn alike: their mean length
    assert abs(result.tokens - expected) < 0.05 * expected, f"tokens trained: {result.tokens} vs about {expected:.0f}"

    data = recipe.checkpoint(module)
    assert isinstance(data, bytes)
    again = recipe.load_checkpoint(data)
    assert recipe.answer(again, prompts) == recipe.answer(module, prompts), "a checkpoint answers as its model"
    model = recipe.load_model(data)  # what serving and evaluation answer with
    assert not model.training and recipe.answer(model, prompts) == recipe.answer(module, prompts)
    warm = recipe.load_checkpoint(data, learning_rate=1e-3, max_steps=5)
    fit(warm, tokens, mask, max_steps=5, max_seconds=60, batch_size=16)  # a warm start trains

    from rmi_pipeline.recipes import pyfunc

    recipe_path = f"{type(recipe).__module__}:{type(recipe).__name__}"
    pyfunc.save(tmp / "model", recipe_path, data)
    loaded = subprocess.run(  # a fresh process, as any MLflow client would load it
        [sys.executable, "-c", "import json, sys, mlflow, pandas as pd; m = mlflow.pyfunc.load_model(sys.argv[1]); "
         "print(json.dumps(list(m.predict(pd.DataFrame({'prompt': sys.argv[2:]}))['completion'])))",
         str(tmp / "model"), *prompts], capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert json.loads(loaded.stdout.strip().splitlines()[-1]) == recipe.answer(module, prompts)
