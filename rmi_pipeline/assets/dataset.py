"""The training dataset: feedback turned into (prompt, target) rows, versioned, checked against the evals.

Targets come from thumbs-up answers and from corrections, and from what the champion made in `practice` (the
best-of-n answers a reward model picked included); where RMI_MIX gives `thumbs_down` a share, new thumbs-down answers
without a correction come too, as completions KTO makes less likely (ml/objective.py), never as targets to imitate;
where it gives `pairs` a share, DPO pairs come too (the preferred answer the target, the other in `rejected`); where
it gives `copied` or `asked_again` a share, new unrated answers with that implicit signal come too, as weak labels (a
copied answer a target, one asked again trained like a thumbs-down). The recipe's seed set and what earlier
champions made (except their RL samples and best-of-n picks) are replayed in every version so nothing learned before is
forgotten. Each row belongs to one source of the training mix (RMI_MIX): its weight is the source's share of every
batch, spread evenly over the source's rows.
Sycophancy policy (text recipes): an answer users approved, copied or wrote that only repeats what the asker claimed
is removed and counted (ml/hygiene.py echoes): their approval is agreement, not evidence.
Contamination policy: rows whose prompt is a sealed eval item (by canonical hash), or, for text recipes,
shares an n-gram with one, are removed and counted: users ask such questions naturally, and dropping them
costs little. Corrected hard cases on the held-out side of the mined split are removed the same way. The eval
suite's leak marker (a string planted in its items) in any row means eval files leaked into feedback: that is no
accident, so the check fails and blocks.
"""

import random
from datetime import UTC, datetime

from dagster import AssetCheckResult, AssetCheckSpec, AssetExecutionContext, MaterializeResult, ResourceParam, asset

from ..ml.mix import EARLIER_PRACTICE, IMPLICIT
from ..resources import layout
from ..resources.registry import CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import WHOLE_ANSWER, Warehouse
from ..settings import Settings
from .evals import eval_suite
from .feedback import feedback_events
from .practice import practice
from .reward import reward_model

CHECKS = [
    AssetCheckSpec("no_eval_overlap", asset="training_dataset", blocking=True,
                   description="No row's canonical prompt hash is an eval item's."),
    AssetCheckSpec("no_leak_marker", asset="training_dataset", blocking=True,
                   description="The eval suite's leak marker appears in no row."),
]


@asset(deps=[feedback_events, eval_suite, practice, reward_model], group_name="training", kinds={"parquet"},
       check_specs=CHECKS)
def training_dataset(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
                     warehouse: Warehouse, registry: ModelRegistry) -> MaterializeResult:
    """A new dataset version (`datasets/<version>/train.parquet` and its manifest): the recipe's seed set, thumbs-up
    answers and corrections from the warehouse (and thumbs-downs, preference pairs and implicit signals, where they
    train) and the champion's practice rows and reward-model picks, each source weighted by its share in RMI_MIX (the
    weights in the manifest); rows that touch the sealed evals are removed and counted. Streamed a chunk at a time:
    memory does not grow with the history (thumbs pairs excepted: their rated answers are matched in memory).
    Blocking checks: no eval overlap, no leak marker."""
    import tempfile
    from pathlib import Path

    import polars as pl

    from ..ml import dataset
    from ..recipes.base import load_recipe

    recipe = load_recipe(settings.recipe)
    manifest = storage.read_json(layout.EVAL_MANIFEST)
    champion = registry.version(CHAMPION)
    trained = _batches_of(storage, champion.tags.get("dataset_version")) if champion else set()
    seed = recipe.seed_tasks(random.Random(settings.seed)) if recipe.has("generator") else []  # else its own model
    seed_rows = pl.DataFrame({"prompt": [t.prompt for t in seed], "target": [t.answer for t in seed],
                              "source": "seed", "scale": 1.0}).with_columns(
        *(pl.lit(None, pl.String).alias(c) for c in ("batch_id", "reference", "teacher")))
    # the whole history, a chunk at a time, in the order it was stored (the same on the same warehouse: sorting
    # 10M events by time cost more than all the checks of their rows)
    feedback = warehouse.stream(_feedback_rows(settings.mix))
    chunks = [[seed_rows], feedback, [_hinted_corrections(recipe, warehouse)], _practice_rows(storage, champion)]
    if settings.mix["pairs"] > 0:  # read only when they train
        chunks.append(_pairs(recipe, warehouse))
    with tempfile.TemporaryDirectory(prefix="rmi-dataset-") as tmp:
        rows_file = Path(tmp) / "train.parquet"
        built = dataset.build((c for source in chunks for c in source), recipe, manifest, trained, settings.mix,
                              rows_file)
        version = f"ds-{datetime.now(UTC):%Y%m%dT%H%M%S}-{built.digest}"
        uri = storage.write_file(layout.dataset_rows(version), str(rows_file))
    batches = sorted(built.batches)
    new_batches = sorted(set(batches) - trained)  # feedback the champion has not learned from
    storage.write_json(layout.dataset_manifest(version), {
        "version": version, "rows": built.rows, "by_source": built.by_source, "mix": settings.mix,
        "weights": built.weights, "batches": batches,
        "new_batches": new_batches, "eval_version": manifest["version"], "created_at": datetime.now(UTC).isoformat(),
    })
    storage.write_json(layout.DATASET_LATEST, {"version": version})
    counts = {k: built.removed[k] for k in ("removed_eval_overlap", "held_out_mined", "removed_ngram_overlap")}
    context.log.info(f"dataset {version}: {built.rows} rows {built.by_source}, {len(new_batches)} new batches, "
                     f"{counts}, {built.removed['removed_echo']} echoing their asker, {built.unusable} unusable")
    return MaterializeResult(
        metadata={"version": version, "uri": uri, "rows": built.rows, "new_feedback_rows": built.new_feedback_rows,
                  "new_batches": ", ".join(new_batches) or "none", "unusable_rows": built.unusable,
                  **counts, "removed_echo": built.removed["removed_echo"],
                  **{f"rows_{k}": v for k, v in built.by_source.items()}},
        check_results=[
            AssetCheckResult(check_name="no_eval_overlap", passed=built.remaining_overlap == 0,
                             metadata={**counts, "remaining_overlap": built.remaining_overlap}),
            AssetCheckResult(check_name="no_leak_marker", passed=built.leak_marker_rows == 0,
                             metadata={"rows_with_leak_marker": built.leak_marker_rows}),
        ],
    )


def _feedback_rows(mix: dict[str, float]) -> str:
    """The query of the warehouse's feedback rows: corrections and thumbs-up answers, and thumbs-downs and implicit
    signals only where their source has a share in RMI_MIX (otherwise they cost nothing). A rated answer keeps its
    rating's label: a signal counts only where no rating or correction says more."""
    signals = ", ".join(f"'{s}'" for s in IMPLICIT if mix[s] > 0)
    # DuckDB's ->> binds looser than IN: the signal in parentheses
    kept = ["correction IS NOT NULL", f"(rating = 'up' AND {WHOLE_ANSWER})",
            *([f"(rating = 'down' AND {WHOLE_ANSWER})"] if mix["thumbs_down"] > 0 else []),
            *([f"(rating IS NULL AND (meta->>'signal') IN ({signals}))"] if signals else [])]
    return ("SELECT prompt, coalesce(correction, completion) AS target, batch_id, "
            "CASE WHEN correction IS NOT NULL THEN 'correction' WHEN rating = 'up' THEN 'thumbs_up' "
            "WHEN rating = 'down' THEN 'thumbs_down' ELSE (meta->>'signal') END AS source, 1.0::DOUBLE AS scale, "
            "NULL::VARCHAR AS reference, NULL::VARCHAR AS teacher "
            f"FROM feedback_events WHERE {' OR '.join(kept)}")


# a correction is preferred to the answer it corrects
_CORRECTION_PAIRS = (
    "SELECT prompt, correction AS target, completion AS rejected, batch_id, 'pair' AS source, 1.0::DOUBLE AS scale "
    "FROM feedback_events WHERE correction IS NOT NULL AND completion IS NOT NULL AND correction <> completion")
_RATED = ("SELECT prompt, completion, rating, batch_id, ts FROM feedback_events WHERE correction IS NULL "
          f"AND rating IN ('up', 'down') AND {WHOLE_ANSWER} AND completion IS NOT NULL ORDER BY ts, event_id")


def _pairs(recipe, warehouse: Warehouse):
    """DPO pairs (source `pair`, the preferred answer as target, the other as `rejected`): each correction over the
    answer it corrects, and each thumbs-down answer under the latest different thumbs-up answer to the same
    canonical prompt. A thumbs pair belongs to the batch of its later half: it is new feedback once both exist. The
    rated answers are held in memory to be matched across batches, only when pairs train."""
    import polars as pl

    yield from warehouse.stream(_CORRECTION_PAIRS)
    rated = warehouse.query(_RATED)
    if rated.is_empty():
        return
    rated = rated.with_columns(canonical=recipe.parse_prompts(rated["prompt"])["canonical"]).drop_nulls("canonical")
    # each canonical prompt's two latest distinct thumbs-up answers: one of them differs from any thumbs-down answer
    ups = (rated.filter(pl.col("rating") == "up").unique(["canonical", "completion"], keep="last", maintain_order=True)
           .group_by("canonical", maintain_order=True).tail(2).select("canonical", "completion", "batch_id", "ts"))
    downs = rated.filter(pl.col("rating") == "down").with_row_index("down")
    matched = (downs.join(ups, on="canonical", suffix="_up").filter(pl.col("completion") != pl.col("completion_up"))
               .sort("down", "ts_up").unique("down", keep="last", maintain_order=True))
    yield matched.select("prompt", pl.col("completion_up").alias("target"), pl.col("completion").alias("rejected"),
                         pl.when(pl.col("ts_up") > pl.col("ts")).then("batch_id_up").otherwise("batch_id")
                         .alias("batch_id"), pl.lit("pair").alias("source"), pl.lit(1.0).alias("scale"))


def _hinted_corrections(recipe, warehouse: Warehouse):
    """For a recipe whose hints are words: each correction the verifier accepts, also as a lesson in reading a
    hint (the critique of the answer the user corrected, in the prompt; the correction as target). The coach's
    hints are only as useful as the model's reading of them at the tiers it is corrected on."""
    import polars as pl

    from ..ml.dataset import schema

    if not recipe.has("hints") or recipe.hint("", "") is None:
        return pl.DataFrame(schema=schema())
    corrected = warehouse.query("SELECT prompt, completion, correction, batch_id FROM feedback_events "
                                "WHERE correction IS NOT NULL ORDER BY ts, event_id")
    rows = [(recipe.hint(p, recipe.verify(p, c)[1]), fix, batch) for p, c, fix, batch in corrected.iter_rows()
            if recipe.is_valid_prompt(p) and recipe.verify(p, fix)[0] == 1 and recipe.verify(p, c)[0] < 1]
    given = {"prompt": [r[0] for r in rows], "target": [r[1] for r in rows], "batch_id": [r[2] for r in rows],
             "source": ["correction"] * len(rows), "scale": [1.0] * len(rows)}
    return pl.DataFrame({name: given.get(name, [None] * len(rows)) for name in schema()}, schema=schema())


def _batches_of(storage: ObjectStore, version: str | None) -> set[str]:
    key = layout.dataset_manifest(version)
    return set(storage.read_json(key)["batches"]) if version and storage.exists(key) else set()


NOT_CARRIED_OVER = ("rl", "best_of_n")  # an earlier champion's rows judged by its own policy or reward model


def _practice_rows(storage: ObjectStore, champion):
    """The rows the current champion made in `practice`, and what earlier champions made, to replay (a frame per
    practice file, as they are read).

    Earlier answers the verifier accepted or the votes agreed on stay true; earlier RL samples and best-of-n picks do
    not carry over: their advantages were measured against a policy that has since moved, the picks made by a reward
    model of another time."""
    import polars as pl

    if champion is None:
        return
    latest = [storage.read_json(k) for k in (layout.PRACTICE_LATEST, layout.BEST_OF_N_LATEST) if storage.exists(k)]
    current = {made.get("rows") for made in latest if made.get("champion_version") == str(champion.version)}
    for key in storage.list(layout.PRACTICE):
        if key.endswith(".parquet"):
            frame = storage.read_parquet(key)
            if key not in current:
                frame = frame.filter(~pl.col("source").is_in(NOT_CARRIED_OVER)).with_columns(
                    source=pl.lit(EARLIER_PRACTICE))
            yield frame.select("prompt", "target", pl.lit(None, pl.String).alias("batch_id"), "source", "scale",
                               "reference", "teacher")
