"""Feedback intake: a landed batch file -> validated events + quarantine -> the DuckDB warehouse."""


import json

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    asset,
)

from .. import layout
from ..partitions import feedback_batches
from ..resources.storage import ObjectStore
from ..resources.warehouse import Warehouse
from ..settings import Settings


@asset(
    partitions_def=feedback_batches,
    group_name="feedback",
    kinds={"json", "parquet"},
    check_specs=[AssetCheckSpec("rows_valid", asset="feedback_batch", blocking=True,
                                description="Share of bad rows stays under RMI_MAX_BAD_SHARE.")],
)
def feedback_batch(context: AssetExecutionContext, storage: ObjectStore) -> MaterializeResult:
    """One landed batch, parsed against schema v1; bad rows go to quarantine with their reason."""
    from ..schema import event_frame, parse_batch

    settings = Settings()
    name = context.partition_key
    parsed = parse_batch(name, storage.read_bytes(f"{layout.INCOMING}/{name}"), name, settings.max_text_chars)
    add_slices(parsed.events, settings.recipe)
    bad_share = len(parsed.quarantined) / max(1, parsed.rows_in)
    passed = bad_share <= settings.max_bad_share
    if not passed:  # too broken to trust any of it: the whole batch waits in quarantine for a person
        reason = f"batch quarantined whole: {bad_share:.0%} bad rows > {settings.max_bad_share:.0%}"
        parsed.quarantined += [{"row": None, "reason": reason, "raw": json.dumps(e, default=str)}
                               for e in parsed.events]
        parsed.events = []
    events = event_frame(parsed.events)
    storage.write_parquet(f"{layout.VALIDATED}/{name}.parquet", events)
    storage.write_bytes(f"{layout.QUARANTINE}/{name}.quarantine.jsonl",
                        "".join(json.dumps(q) + "\n" for q in parsed.quarantined).encode())
    reasons: dict[str, int] = {}
    for q in parsed.quarantined:
        reasons[q["reason"]] = reasons.get(q["reason"], 0) + 1
    summary = {"rows_in": parsed.rows_in, "valid": len(events), "quarantined": len(parsed.quarantined),
               "duplicates_in_batch": parsed.duplicates}
    storage.write_json(f"{layout.VALIDATED}/{name}.summary.json", summary)
    context.log.info(f"batch {name}: {summary}")
    top = dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:10])
    return MaterializeResult(
        metadata={**summary, "quarantine_reasons": top},
        check_results=[AssetCheckResult(
            check_name="rows_valid", passed=passed, severity=AssetCheckSeverity.ERROR,
            metadata={"bad_share": round(bad_share, 4), "limit": settings.max_bad_share, **summary})],
    )


def add_slices(events: list[dict], recipe_path: str) -> None:
    """Each event's tier (not in schema v1), and its skill when the client sent none, from the recipe.

    A prompt the recipe does not know keeps tier null: it is still feedback, only not one of the model's slices.
    """
    from ..recipes.base import load_recipe

    if not events:
        return
    recipe = load_recipe(recipe_path)
    for event in events:
        try:
            skill, tier = recipe.slice_of(event["prompt"]) if recipe.is_valid_prompt(event["prompt"]) else (None, None)
        except Exception:  # noqa: BLE001 - a recipe that trips on one odd prompt must not fail the batch
            skill, tier = None, None
        event["tier"] = tier
        event["skill"] = event["skill"] or skill


@asset(partitions_def=feedback_batches, deps=[feedback_batch], group_name="feedback", kinds={"duckdb"})
def feedback_events(context: AssetExecutionContext, storage: ObjectStore, warehouse: Warehouse) -> MaterializeResult:
    """The batch's valid events in the warehouse, once each: re-running a batch changes nothing."""
    name = context.partition_key
    summary = storage.read_json(f"{layout.VALIDATED}/{name}.summary.json")
    ingested, duplicates = warehouse.ingest(storage.read_parquet(f"{layout.VALIDATED}/{name}.parquet"))
    counts = {"rows_in": summary["rows_in"], "ingested": ingested,
              "duplicates": duplicates + summary["duplicates_in_batch"], "quarantined": summary["quarantined"]}
    if counts["rows_in"] != counts["ingested"] + counts["duplicates"] + counts["quarantined"]:
        raise RuntimeError(f"feedback rows unaccounted for in batch {name}: {counts}")
    total = warehouse.query("SELECT count(*) AS n FROM feedback_events")["n"][0]
    context.log.info(f"batch {name}: {counts}; warehouse holds {total} events")
    return MaterializeResult(metadata={**counts, "warehouse_events": int(total)})

