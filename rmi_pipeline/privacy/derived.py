"""A deletion in what the loop made of the deleted events: training datasets, the champion's practice rows, the
sealed eval store's mined hard cases and the judge's cached verdicts. They keep texts, not event or user ids.

A dataset row is the deleted events' when its batch is one of theirs, its prompt is one of theirs in that batch (or
begins with one and a new line: the same question with a hint in it), and its target, or the answer it was preferred
to, is one of their answers or corrections. A row identical to it in the same batch goes with it: the two cannot be
told apart. Where no batch is kept (practice rows, mined hard cases), a row goes when its question is one the deleted
events asked and no event left in the warehouse asks it: while another user asks it, it is that user's too.
"""

from __future__ import annotations

import io
import json

from ..resources import layout
from ..resources.storage import ObjectStore
from ..resources.warehouse import Warehouse
from ..settings import Settings
from .ledger import Ledger

MIN_QUOTED = 8  # the shortest question looked for inside a judge's reasons: shorter ones match by chance


def forget_made(storage: ObjectStore, eval_store: ObjectStore, warehouse: Warehouse, settings: Settings, events,
                ledger: Ledger) -> None:
    """Remove what was made of `events` (a polars frame: batch_id, prompt, completion, correction, as the warehouse
    held them), each rewrite counted in `ledger` (with the dataset versions that held rows of them)."""
    if events.is_empty():
        return
    for version in _dataset_versions(storage):
        _forget_in_dataset(storage, version, events, ledger)
    asked = warehouse.held("prompt", events["prompt"].unique().to_list())
    alone = set(events["prompt"].unique().to_list()) - asked  # questions no one else asks
    if alone:
        _forget_in_practice(storage, alone, ledger)
        _forget_in_mined(eval_store, alone, ledger)
        _forget_in_judge_cache(eval_store, settings, events, alone, ledger)


def _dataset_versions(storage: ObjectStore) -> list[str]:
    _, others = storage.listing(layout.DATASETS)  # the versions are folders: "name (directory)"
    return sorted(o.rsplit(" (", 1)[0] for o in others)


def _forget_in_dataset(storage: ObjectStore, version: str, events, ledger: Ledger) -> None:
    """The rows of `events` out of one dataset version, and its manifest's counts and weights made to match."""
    import polars as pl

    manifest_key, rows_key = layout.dataset_manifest(version), layout.dataset_rows(version)
    if not (storage.exists(manifest_key) and storage.exists(rows_key)):
        return
    manifest = storage.read_json(manifest_key)
    if not set(manifest.get("batches", [])) & set(events["batch_id"].drop_nulls().to_list()):
        return
    data = storage.read_bytes(rows_key)
    frame = pl.read_parquet(io.BytesIO(data))
    answers = (pl.concat([events.select("batch_id", "prompt", text=c) for c in ("completion", "correction")])
               .drop_nulls().unique())
    indexed = frame.with_row_index("_row")
    doomed = set()
    for column in ("target", "rejected"):
        if column in frame.columns:
            doomed |= set(indexed.join(answers, left_on=["batch_id", "prompt", column],
                                       right_on=["batch_id", "prompt", "text"], how="semi")["_row"].to_list())
    hinted = indexed.filter(pl.col("prompt").str.contains("\n", literal=True) & pl.col("batch_id").is_not_null())
    if hinted.height:  # a question with a hint after it: the same question, asked with the coach's words
        known = set(answers.iter_rows())
        for row, batch, prompt, target, rejected in hinted.select(
                "_row", "batch_id", "prompt", "target",
                "rejected" if "rejected" in frame.columns else pl.lit(None, pl.String)).iter_rows():
            parts = prompt.split("\n")
            heads = ("\n".join(parts[:k]) for k in range(1, len(parts)))
            if any((batch, head, text) in known for head in heads for text in (target, rejected) if text):
                doomed.add(row)
    if doomed:
        frame = indexed.filter(~pl.col("_row").is_in(sorted(doomed))).drop("_row")
        ledger.write_parquet(storage, rows_key, data, frame, {"dataset_rows": len(doomed), "datasets_rewritten": 1},
                             dataset=version)
    recounted = _recounted(manifest, frame, len(doomed))
    if recounted != manifest:  # also after a deletion killed between the rows and the manifest
        storage.write_json(manifest_key, recounted)


def _recounted(manifest: dict, frame, removed: int) -> dict:
    """The manifest with its rows per source of the mix, and each source's weight, as the rows now are."""
    from ..ml.mix import weights

    if "mix" not in frame.columns:
        return manifest
    counts = dict(frame.group_by("mix").len().iter_rows())
    by_source = {m: counts[m] for m in manifest.get("by_source", {}) if counts.get(m)}
    if by_source == manifest.get("by_source") and not removed:
        return manifest
    try:
        weighted = weights(by_source, manifest["mix"]) if by_source else {}
    except (KeyError, ValueError):
        weighted = {}
    return {**manifest, "rows": sum(by_source.values()), "by_source": by_source, "weights": weighted,
            "forgotten_rows": manifest.get("forgotten_rows", 0) + removed}


def _asks(prompts, alone: set[str]):
    """Which of `prompts` (a polars Series) ask one of the questions `alone`, as they are or with a hint after."""
    questions = list(alone)
    return (prompts.is_in(questions) | prompts.str.split("\n").list.first().is_in(questions)).fill_null(False)


def _forget_in_practice(storage: ObjectStore, alone: set[str], ledger: Ledger) -> None:
    """Practice rows (the champion's answers to questions users failed it on) and the coach's failed prompts."""
    import polars as pl

    for key in storage.list(layout.PRACTICE):
        if key.endswith(".parquet"):
            data = storage.read_bytes(key)
            frame = pl.read_parquet(io.BytesIO(data))
            if "prompt" not in frame.columns:
                continue
            doomed = _asks(frame["prompt"], alone)
            if doomed.any():
                ledger.write_parquet(storage, key, data, frame.filter(~doomed), {"practice_rows": int(doomed.sum())})
        elif key.endswith("-failed.json"):
            data = storage.read_bytes(key)
            failed = json.loads(data)
            kept = [p for p in failed.get("prompts", []) if p not in alone and p.split("\n")[0] not in alone]
            if len(kept) < len(failed.get("prompts", [])):
                ledger.write_json(storage, key, data, {**failed, "prompts": kept},
                                  {"practice_failed_prompts": len(failed["prompts"]) - len(kept)})


def _forget_in_mined(eval_store: ObjectStore, alone: set[str], ledger: Ledger) -> None:
    """The mined hard cases: users' corrections held out as eval items."""
    for key in eval_store.list(layout.MINED):
        if key.endswith(".json"):
            data = eval_store.read_bytes(key)
            mined = json.loads(data)
            kept = [i for i in mined.get("items", []) if i.get("prompt") not in alone]
            if len(kept) < len(mined.get("items", [])):
                ledger.write_json(eval_store, key, data, {**mined, "items": kept},
                                  {"mined_items": len(mined["items"]) - len(kept)})


def _forget_in_judge_cache(eval_store: ObjectStore, settings: Settings, events, alone: set[str],
                           ledger: Ledger) -> None:
    """The judge's verdicts on the deleted events' answers (by the cache's key, for the judge and rubric set now),
    and any whose reasons quote one of their questions."""
    from types import SimpleNamespace

    from ..scoring.judge import JudgeScorer, ScorerError, parse_criteria

    if not eval_store.exists(layout.JUDGE_CACHE):
        return
    data = eval_store.read_bytes(layout.JUDGE_CACHE)
    cache = json.loads(data)
    try:
        judge = SimpleNamespace(settings=settings.judge, criteria=parse_criteria(settings.judge.criteria))
        keys = {JudgeScorer.key(judge, p, c, None) for p, c in events.select("prompt", "completion").iter_rows()}
    except ScorerError:
        keys = set()
    quoted = [p for p in alone if len(p) >= MIN_QUOTED]
    doomed = {k for k, entry in cache.items() if k in keys or any(
        q in str(v.get("reason", "")) for v in entry.get("verdicts", []) if isinstance(v, dict) for q in quoted)}
    if doomed:
        ledger.write_json(eval_store, layout.JUDGE_CACHE, data, {k: v for k, v in cache.items() if k not in doomed},
                          {"judge_verdicts": len(doomed)})
