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
    """Parse and validate a landed batch, redact personal data in it (RMI_REDACT); write its valid events, its
    quarantine and its summary; then remove its original (or move it to RMI_REDACT_ORIGINALS_URL).

    Returns (summary, rows_valid check metadata with `passed`)."""
    from ..schema import parse_batch

    summary_key = layout.validated_summary(name)
    if storage.exists(summary_key) and (done := storage.read_json(summary_key)).get("original") is not None:
        _remove_original(storage, name, settings)  # a run killed before it did: the original goes, the check stands
        return {k: v for k, v in done.items() if k != "check"}, done["check"]
    parsed = parse_batch(name, storage.read_bytes(layout.incoming(name)), name, settings.feedback.max_text_chars,
                         settings.cache_dir)
    events = add_slices(parsed.frame, settings.recipe)
    redacted = None
    if settings.privacy.redact:
        events, redacted = redact_batch(events, parsed.quarantined, settings)
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
               "duplicates_in_batch": parsed.duplicates, "quarantined_whole": not passed,
               **(redacted.metadata() if redacted else {})}
    check = {
        "passed": passed, "bad_share": round(bad_share, 4), "limit": settings.feedback.max_bad_share,
        "expectations_evaluated": parsed.expectations_evaluated,
        "failed_expectations": parsed.failed_expectations,  # expectation -> rows that fail it
        "rows_not_parsed": parsed.unparsed,  # never became a row (malformed JSON, invalid UTF-8, ...)
        "quarantine_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:10]),
    }
    if redacted is None:
        storage.write_json(summary_key, summary)
        return summary, check
    where = settings.privacy.redact_originals_url
    summary["original"] = f"moved to {where}" if where else "removed"
    storage.write_json(summary_key, {**summary, "check": check})
    _remove_original(storage, name, settings)
    return summary, check


def redact_batch(events, quarantined: list[dict], settings: Settings):
    """The events with personal data replaced by <TYPE> placeholders, the quarantined rows' raw text too; what was
    found (privacy/redact.py)."""
    from ..privacy.redact import redactor
    from ..recipes.base import load_recipe

    redactor = redactor(settings)
    events, found = redactor.events(events)
    raws, in_quarantine = redactor.raw_rows([row["raw"] for row in quarantined], load_recipe(settings.recipe))
    for row, raw in zip(quarantined, raws, strict=True):
        row["raw"] = raw
    found.add(in_quarantine)
    return events, found


def _remove_original(storage: ObjectStore, name: str, settings: Settings) -> None:
    """Once redacted, a landed file's original goes: moved to the originals store a team keeps, or emptied (its
    name stays in incoming/: the sensor knows a batch by its file's name)."""
    key = layout.incoming(name)
    data = storage.read_bytes(key) if storage.exists(key) else b""
    if not data:
        return
    if settings.privacy.redact_originals_url:
        ObjectStore(url=settings.privacy.redact_originals_url,
                    endpoint_url=settings.storage.s3_endpoint_url).write_bytes(key, data)
    storage.write_bytes(key, b"")


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
    ingested, duplicates = warehouse.ingest(storage.read_parquet(layout.validated(name)), name,
                                            summary.get("redacted"))
    counts = {"rows_in": summary["rows_in"], "ingested": ingested,
              "duplicates": duplicates + summary["duplicates_in_batch"], "quarantined": summary["quarantined"]}
    if counts["rows_in"] != counts["ingested"] + counts["duplicates"] + counts["quarantined"]:
        raise RuntimeError(f"feedback rows unaccounted for in batch {name}: {counts}")
    total = warehouse.query("SELECT count(*) AS n FROM feedback_events")["n"][0]
    return {**counts, "warehouse_events": int(total)}
