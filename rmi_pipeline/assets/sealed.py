"""Models' answers to the sealed eval, scored, for whichever asset judges them: candidate_evaluation (a challenger
against the champion), challenger_selection (several challengers against each other) and fast_model (a derivative
against the champion that taught it). Only evaluation assets call it: training never opens the suite."""

import time
from dataclasses import dataclass

from ..resources import layout
from ..resources.registry import ModelRegistry
from ..resources.storage import ObjectStore
from ..settings import Settings
from .evals import eval_scorer, keep_verdicts, load_sets, remember, remembered, save_slice_scores


@dataclass
class Sealed:
    """Models' answers to every sealed eval item (the public set's too), scored; the first model is the one judged."""

    manifest: dict
    private: set  # the counted slices as (skill, tier)
    sets: dict
    scored: object  # ml/scored.Scored
    memos: list
    scorer: object
    judge_usage: dict
    seconds: float


def answer_sealed(settings: Settings, recipe, storage: ObjectStore, eval_store: ObjectStore, registry: ModelRegistry,
                  versions: list, part: tuple[str, float, bool] | None = None) -> Sealed:
    """`versions` (model versions, the one judged first) answer the sealed suite, or one part of it (`part`: the
    salt and share of a split, and True for the selection part, False for the confirmation part); answers each gave
    before on the same items under the same scorer are reused, new ones remembered, and each version's score per
    slice saved."""
    import numpy as np

    from ..ml.scored import Scored, eval_tasks

    manifest = storage.read_json(layout.EVAL_MANIFEST)
    private = {(s["skill"], s["tier"]) for s in manifest["slices"] if s["private"]}
    sets = {**load_sets(eval_store, manifest), "public": [vars(t) for t in recipe.public_eval()]}
    tasks = eval_tasks(sets)
    if part is not None:
        salt, share, selection = part
        mask = in_part(tasks, salt, share)
        tasks = [t for t, chosen in zip(tasks, mask, strict=True) if chosen == selection]
    scorer = eval_scorer(settings, eval_store)
    memos = [remembered(recipe, registry, eval_store, mv, scorer) for mv in versions]
    started = time.perf_counter()
    try:
        scored = Scored(tasks, [np.array(memo.scores([t for _, t in tasks]), dtype=float) for memo in memos])
    finally:
        judge_usage = keep_verdicts(eval_store, scorer)
    seconds = time.perf_counter() - started
    for mv, memo in zip(versions, memos, strict=True):
        remember(eval_store, registry, mv, memo, only_asked=True)
    for mv, right in zip(versions, scored.right, strict=True):
        save_slice_scores(storage, mv.version, manifest, {n: float(p.challenger.mean())
                                                         for n, p in Scored(tasks, [right]).slices().items()})
    return Sealed(manifest, private, sets, scored, memos, scorer, judge_usage, seconds)


def in_part(tasks: list, salt: str, share: float):
    """Which eval items (set name, task) choose among several challengers: `share` of every set's slice, by a hash
    salted with the cycle (ml/selection.py); the others confirm the winner."""
    from ..ml.scored import item_key
    from ..ml.selection import in_selection

    return in_selection([f"{name}/{task.skill}/{task.tier}" for name, task in tasks],
                        [item_key(task) for _, task in tasks], share, salt)
