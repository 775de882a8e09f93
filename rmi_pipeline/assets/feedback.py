"""Feedback intake: a landed batch file -> validated events + quarantine -> the DuckDB warehouse.

The assets are thin: `check_batch` and `land_batch` do the work, so that bench/ingest.py times exactly what a run
does, without Dagster around it.
"""

import json

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    ResourceParam,
    asset,
)

from ..resources import layout
from ..resources.storage import ObjectStore
from ..resources.warehouse import Warehouse
from ..settings import Settings
from .partitions import feedback_batches


@asset(
    partitions_def=feedback_batches,
    group_name="feedback",
    kinds={"json", "parquet"},
    check_specs=[AssetCheckSpec("rows_valid", asset="feedback_batch", blocking=True,
                                description="Every row meets the schema v1 expectation suite (Great Expectations); "
                                            "the share of bad rows stays under RMI_FEEDBACK_MAX_BAD_SHARE.")],
)
def feedback_batch(context: AssetExecutionContext, settings: ResourceParam[Settings],
                   storage: ObjectStore) -> MaterializeResult:
    """One landed batch file (`feedback/incoming/<batch>`), parsed and validated against schema v1: its valid events
    go to feedback/validated/, bad rows to feedback/quarantine/ with their reasons."""
    summary, check = check_batch(storage, context.partition_key, settings)
    context.log.info(f"batch {context.partition_key}: {summary}")
    failed = check["failed_expectations"]
    return MaterializeResult(
        metadata={**summary, "quarantine_reasons": check.pop("quarantine_reasons")},
        check_results=[AssetCheckResult(
            check_name="rows_valid", passed=check.pop("passed"), severity=AssetCheckSeverity.ERROR,
            metadata={**check, "expectations": MetadataValue.md(_expectation_table(failed, check)), **summary})],
    )


def check_batch(storage: ObjectStore, name: str, settings: Settings) -> tuple[dict, dict]:
    """Parse and validate a landed batch; write its valid events, its quarantine and its summary.

    Returns (summary, rows_valid check metadata with `passed`)."""
    from ..schema import parse_batch

    parsed = parse_batch(name, storage.read_bytes(layout.incoming(name)), name, settings.feedback.max_text_chars,
                         settings.cache_dir)
    events = add_slices(parsed.frame, settings.recipe)
    rows_in = parsed.rows_in
    bad_share = len(parsed.quarantined) / max(1, rows_in)
    passed = bad_share <= settings.feedback.max_bad_share
    if not passed:  # too broken to trust any of it: the whole batch waits in quarantine for a person
        reason = f"batch quarantined whole: {bad_share:.0%} bad rows > {settings.feedback.max_bad_share:.0%}"
        parsed.quarantined += [{"row": None, "reason": reason, "raw": json.dumps(e, default=str)}
                               for e in events.to_dicts()]
        events = events.clear()
    storage.write_parquet(layout.validated(name), events)
    storage.write_bytes(layout.quarantine(name),
                        "".join(json.dumps(q) + "\n" for q in parsed.quarantined).encode())
    reasons: dict[str, int] = {}
    for q in parsed.quarantined:
        reasons[q["reason"]] = reasons.get(q["reason"], 0) + 1
    summary = {"rows_in": rows_in, "valid": events.height, "quarantined": len(parsed.quarantined),
               "duplicates_in_batch": parsed.duplicates, "quarantined_whole": not passed}
    storage.write_json(layout.validated_summary(name), summary)
    check = {
        "passed": passed, "bad_share": round(bad_share, 4), "limit": settings.feedback.max_bad_share,
        "expectations_evaluated": parsed.expectations_evaluated,
        "failed_expectations": parsed.failed_expectations,  # expectation -> rows that fail it
        "rows_not_parsed": parsed.unparsed,  # never became a row (malformed JSON, invalid UTF-8, ...)
        "quarantine_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:10]),
    }
    return summary, check


def _expectation_table(failed: dict[str, int], check: dict) -> str:
    """The check's result as the UI shows it: every failed expectation and how many rows fail it."""
    if not failed:
        return f"All {check['expectations_evaluated']} expectations of feedback schema v1 passed."
    lines = ["| expectation | failing rows |", "|---|---:|"]
    lines += [f"| `{name}` | {count} |" for name, count in failed.items()]
    return "\n".join(lines)


def add_slices(events, recipe_path: str):
    """Each event's tier (not in schema v1), and its skill when the client sent none, from the recipe's batch form
    of slice_of (`Recipe.parse_prompts`), once per distinct prompt.

    A prompt the recipe does not know keeps tier null: it is still feedback, only not one of the model's slices.
    """
    import polars as pl

    from ..recipes.base import load_recipe

    if events.is_empty():
        return events
    recipe = load_recipe(recipe_path)
    prompts = events["prompt"].unique()
    known = recipe.parse_prompts(prompts).select(prompt=prompts, recipe_skill="skill", recipe_tier="tier")
    return (events.join(known, on="prompt", how="left", maintain_order="left")
            .with_columns(tier=pl.col("recipe_tier"), skill=pl.coalesce("skill", "recipe_skill"))
            .drop("recipe_skill", "recipe_tier"))


@asset(partitions_def=feedback_batches, deps=[feedback_batch], group_name="feedback", kinds={"duckdb"})
def feedback_events(context: AssetExecutionContext, storage: ObjectStore, warehouse: Warehouse) -> MaterializeResult:
    """The batch's valid events in the DuckDB warehouse (table feedback_events), once each by event_id: re-running
    a batch changes nothing. Its counts add up: rows in = ingested + duplicates + quarantined."""
    counts = land_batch(storage, warehouse, context.partition_key)
    context.log.info(f"batch {context.partition_key}: {counts}")
    return MaterializeResult(metadata=counts)


def land_batch(storage: ObjectStore, warehouse: Warehouse, name: str) -> dict:
    """A validated batch into the warehouse; its counts, which must add up."""
    summary = storage.read_json(layout.validated_summary(name))
    ingested, duplicates = warehouse.ingest(storage.read_parquet(layout.validated(name)))
    counts = {"rows_in": summary["rows_in"], "ingested": ingested,
              "duplicates": duplicates + summary["duplicates_in_batch"], "quarantined": summary["quarantined"]}
    if counts["rows_in"] != counts["ingested"] + counts["duplicates"] + counts["quarantined"]:
        raise RuntimeError(f"feedback rows unaccounted for in batch {name}: {counts}")
    total = warehouse.query("SELECT count(*) AS n FROM feedback_events")["n"][0]
    return {**counts, "warehouse_events": int(total)}
