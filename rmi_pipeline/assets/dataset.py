"""The training dataset: feedback turned into (prompt, target) rows, versioned, checked against the evals.

Targets come from thumbs-up answers and from corrections (thumbs-down without a correction teach nothing here),
and from what the champion made in `practice`. The recipe's seed set and what earlier champions made are replayed
in every version so nothing learned before is forgotten. Each row belongs to one source of the training mix
(RMI_MIX): its weight is the source's share of every batch, spread evenly over the source's rows.
Contamination policy: rows whose prompt is a sealed eval item (by canonical hash), or, for text recipes,
shares an n-gram with one, are removed and counted: users ask such questions naturally, and dropping them
costs little. Corrected hard cases on the held-out side of the mined split are removed the same way. A canary
string in any row means eval files leaked into feedback: that is no accident, so the check fails and blocks.
"""

import hashlib
import random
from datetime import UTC, datetime

from dagster import AssetCheckResult, AssetCheckSpec, AssetExecutionContext, MaterializeResult, ResourceParam, asset

from ..ml.mix import EARLIER_PRACTICE, mix_sources, weigh
from ..resources import layout
from ..resources.registry import CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import Warehouse
from ..settings import Settings
from .evals import eval_suite
from .feedback import feedback_events
from .practice import practice

CHECKS = [
    AssetCheckSpec("no_eval_overlap", asset="training_dataset", blocking=True,
                   description="No row's canonical prompt hash is an eval item's."),
    AssetCheckSpec("no_canary", asset="training_dataset", blocking=True,
                   description="The eval suite's canary string appears in no row."),
]


@asset(deps=[feedback_events, eval_suite, practice], group_name="training", kinds={"parquet"}, check_specs=CHECKS)
def training_dataset(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
                     warehouse: Warehouse, registry: ModelRegistry) -> MaterializeResult:
    """A new dataset version (`datasets/<version>/train.parquet` and its manifest): the recipe's seed set, thumbs-up
    answers and corrections from the warehouse and the champion's practice rows, each weighted by its source's
    share in RMI_MIX; rows that touch the sealed evals are removed and counted. Blocking checks: no eval overlap,
    no canary."""
    import polars as pl

    from ..ml.hygiene import is_mined_holdout, ngram_hashes
    from ..recipes.base import load_recipe

    recipe = load_recipe(settings.recipe)
    manifest = storage.read_json(layout.EVAL_MANIFEST)
    eval_hashes, canary = set(manifest["hashes"]), manifest["canary"]
    eval_ngrams = set(manifest.get("ngram_hashes", []))

    feedback = warehouse.query(
        "SELECT prompt, coalesce(correction, completion) AS target, batch_id, "
        "CASE WHEN correction IS NOT NULL THEN 'correction' ELSE 'thumbs_up' END AS source, 1.0::DOUBLE AS scale, "
        "NULL::VARCHAR AS reference, NULL::VARCHAR AS teacher "
        "FROM feedback_events WHERE correction IS NOT NULL OR rating = 'up' ORDER BY ts, event_id")
    seed = recipe.seed_tasks(random.Random(settings.seed))
    champion = registry.version(CHAMPION)
    rows = pl.concat([
        pl.DataFrame({"prompt": [t.prompt for t in seed], "target": [t.answer for t in seed],
                      "batch_id": [None] * len(seed), "source": ["seed"] * len(seed), "scale": [1.0] * len(seed),
                      "reference": [None] * len(seed), "teacher": [None] * len(seed)},
                     schema=feedback.schema),
        feedback,
        _hinted_corrections(recipe, warehouse, feedback.schema),
        _practice_rows(storage, champion, feedback.schema),
    ])
    canary_rows = rows.filter(pl.col("prompt").str.contains(canary, literal=True)
                              | pl.col("target").str.contains(canary, literal=True)).height
    usable = [recipe.is_valid_prompt(p) and recipe.is_valid_completion(t)
              for p, t in zip(rows["prompt"], rows["target"], strict=True)]
    unusable = len(rows) - sum(usable)
    rows = rows.filter(pl.Series(usable))
    hashes = pl.Series([recipe.prompt_hash(p) for p in rows["prompt"]], dtype=pl.String)
    eval_list = list(eval_hashes)
    overlap = hashes.is_in(eval_list)
    # corrected hard cases on the held-out side of the split are the mined eval slice: never train on them
    mined = pl.Series([src == "correction" and is_mined_holdout(h, manifest["mined_share"])
                       for src, h in zip(rows["source"], hashes, strict=True)], dtype=pl.Boolean)
    pairs = zip(rows["prompt"], rows["target"], strict=True)
    ngram = pl.Series([any(ngram_hashes(text, manifest["ngram_n"]) & eval_ngrams for text in pair) for pair in pairs]
                      if eval_ngrams else [False] * len(rows), dtype=pl.Boolean)
    counts = {"removed_eval_overlap": int((overlap & ~mined).sum()), "held_out_mined": int(mined.sum()),
              "removed_ngram_overlap": int((ngram & ~overlap & ~mined).sum())}
    kept = ~(overlap | mined | ngram)
    rows = rows.filter(kept)
    remaining = int(hashes.filter(kept).is_in(eval_list).sum())
    slices = [recipe.slice_of(p) for p in rows["prompt"]]
    rows = rows.with_columns(skill=pl.Series([s for s, _ in slices]), tier=pl.Series([t for _, t in slices]))

    trained = _batches_of(storage, champion.tags.get("dataset_version")) if champion else set()
    batches = sorted(b for b in rows["batch_id"].unique().to_list() if b is not None)
    new_batches = sorted(set(batches) - trained)  # feedback the champion has not learned from
    n_new = int(rows["batch_id"].is_in(new_batches).sum())
    rows, by_source = weigh(mix_sources(rows, new_batches), settings.mix)  # rows per source of the training mix

    digest = hashlib.sha256(rows.select("prompt", "target").write_csv().encode()).hexdigest()[:8]
    version = f"ds-{datetime.now(UTC):%Y%m%dT%H%M%S}-{digest}"
    uri = storage.write_parquet(layout.dataset_rows(version), rows)
    storage.write_json(layout.dataset_manifest(version), {
        "version": version, "rows": len(rows), "by_source": by_source, "batches": batches,
        "new_batches": new_batches, "eval_version": manifest["version"], "created_at": datetime.now(UTC).isoformat(),
    })
    storage.write_json(layout.DATASET_LATEST, {"version": version})
    context.log.info(f"dataset {version}: {len(rows)} rows {by_source}, {len(new_batches)} new batches, "
                     f"{counts}, {unusable} unusable")
    return MaterializeResult(
        metadata={"version": version, "uri": uri, "rows": len(rows), "new_feedback_rows": n_new,
                  "new_batches": ", ".join(new_batches) or "none", "unusable_rows": unusable,
                  **counts, **{f"rows_{k}": v for k, v in by_source.items()}},
        check_results=[
            AssetCheckResult(check_name="no_eval_overlap", passed=remaining == 0,
                             metadata={**counts, "remaining_overlap": remaining}),
            AssetCheckResult(check_name="no_canary", passed=canary_rows == 0,
                             metadata={"rows_with_canary": canary_rows}),
        ],
    )


def _hinted_corrections(recipe, warehouse: Warehouse, schema):
    """For a recipe whose hints are words: each correction the verifier accepts, also as a lesson in reading a
    hint (the critique of the answer the user corrected, in the prompt; the correction as target). The coach's
    hints are only as useful as the model's reading of them at the tiers it is corrected on."""
    import polars as pl

    if recipe.hint("", "") is None:
        return pl.DataFrame(schema=schema)
    corrected = warehouse.query("SELECT prompt, completion, correction, batch_id FROM feedback_events "
                                "WHERE correction IS NOT NULL ORDER BY ts, event_id")
    rows = [(recipe.hint(p, recipe.verify(p, c)[1]), fix, batch) for p, c, fix, batch in corrected.iter_rows()
            if recipe.is_valid_prompt(p) and recipe.verify(p, fix)[0] == 1 and recipe.verify(p, c)[0] < 1]
    return pl.DataFrame({"prompt": [r[0] for r in rows], "target": [r[1] for r in rows],
                         "batch_id": [r[2] for r in rows], "source": ["correction"] * len(rows),
                         "scale": [1.0] * len(rows), "reference": [None] * len(rows), "teacher": [None] * len(rows)},
                        schema=schema)


def _batches_of(storage: ObjectStore, version: str | None) -> set[str]:
    key = layout.dataset_manifest(version)
    return set(storage.read_json(key)["batches"]) if version and storage.exists(key) else set()


def _practice_rows(storage: ObjectStore, champion, schema):
    """The rows the current champion made in `practice`, and what earlier champions made, to replay.

    Earlier answers the verifier accepted or the votes agreed on stay true; earlier RL samples do not carry over:
    their advantages were measured against a policy that has since moved."""
    import polars as pl

    latest = storage.read_json(layout.PRACTICE_LATEST) if storage.exists(layout.PRACTICE_LATEST) else {}
    if champion is None:
        return pl.DataFrame(schema=schema)
    current = latest.get("rows") if latest.get("champion_version") == str(champion.version) else None
    made = []
    for key in storage.list(layout.PRACTICE):
        if key.endswith(".parquet"):
            frame = storage.read_parquet(key)
            for column in ("reference", "teacher"):  # made before wrong RL answers named a right one, or before
                if column not in frame.columns:      # hinted successes kept their hinted prompt
                    frame = frame.with_columns(pl.lit(None, pl.String).alias(column))
            if key != current:
                frame = frame.filter(pl.col("source") != "rl").with_columns(source=pl.lit(EARLIER_PRACTICE))
            made.append(frame.select("prompt", "target", pl.lit(None, pl.String).alias("batch_id"), "source",
                                     "scale", "reference", "teacher"))
    return pl.concat(made) if made else pl.DataFrame(schema=schema)
