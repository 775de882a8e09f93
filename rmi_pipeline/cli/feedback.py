"""`rmi feedback`: land a feedback file by hand, and read what users say about the models.

    rmi feedback ingest PATH [--dry-run]   validate a .jsonl, .jsonl.gz or .parquet file, land it in
                                           feedback/incoming/ under its name, and ingest it now
    rmi feedback import {langfuse,phoenix,otel} FILE... [--dry-run]
                                           feedback collected in Langfuse, Phoenix or OpenTelemetry,
                                           converted to schema v1 and landed as `ingest` lands a file
    rmi feedback stats [--days 7] [--top 10]
                                           thumbs-down by model version, skill and tier (per day),
                                           the most failed prompts and the latest corrections
    rmi feedback forget --user ID --reason T
                                           delete a user's feedback from every store (audited), and
                                           name the model versions trained on it
    rmi feedback forget --pending          complete the deletions asked for before (gateway, Slack, a
                                           run that was stopped)

Ingest goes through the same sensor tick and ingest job as the daemon, so a file landed here is
validated, quarantined and counted exactly like one a production service writes.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ..settings import Settings
from .home import prepare_home, say

CELL = 40  # widest cell in a printed table; prompts and corrections can be long


def ingest(
    path: Annotated[Path, typer.Argument(help="A .jsonl, .jsonl.gz or .parquet file of schema v1 events.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and report only; land nothing.")] = False,
    follow_symlinks: Annotated[bool, typer.Option(
        "--follow-symlinks", help="Read the file a link points to (refused by default: the link, not what it names, "
                                  "is what was handed over).")] = False,
) -> int:
    """Validate a feedback file, land it in feedback/incoming/ under its name and ingest it now (the same sensor
    tick and ingest job as the daemon). Settings: RMI_FEEDBACK_MAX_BAD_SHARE, RMI_FEEDBACK_MAX_TEXT_CHARS."""
    from ..assets.partitions import can_be_partition
    from ..schema import SUFFIXES, is_batch_file

    name = path.name
    if path.is_symlink() and not follow_symlinks:
        raise ValueError(f"{path} is a symbolic link; pass --follow-symlinks to read the file it points to")
    if not path.is_file():
        raise FileNotFoundError(f"not a file: {path}")
    if not is_batch_file(name) or not can_be_partition(name):
        raise ValueError(f"{name!r} is not a batch name: it must end in {' / '.join(SUFFIXES)}, not start with "
                         "'.', and hold no '...' or control characters")
    return land(name, path.read_bytes(), dry_run)


def land(name: str, data: bytes, dry_run: bool = False, trigger: str = "rmi-feedback-ingest",
         landed_before: str | None = None) -> int:
    """Validate a batch, land it in feedback/incoming/ under `name` and ingest it now; `landed_before`: what to say
    (exit 0) instead of refusing a name that has landed already."""
    from ..resources import layout
    from ..schema import parse_batch

    settings = Settings()
    parsed = parse_batch(name, data, name, settings.feedback.max_text_chars, settings.cache_dir)
    say(f"{name}: {parsed.rows_in} rows, {parsed.frame.height} valid, {parsed.duplicates} repeated in the file, "
        f"{len(parsed.quarantined)} bad")
    for reason, count in _top_reasons(parsed.quarantined):
        say(f"  {count:>6}  {reason}")
    bad_share = len(parsed.quarantined) / max(1, parsed.rows_in)
    if bad_share > settings.feedback.max_bad_share:
        say(f"not landed: {bad_share:.0%} bad rows > RMI_FEEDBACK_MAX_BAD_SHARE {settings.feedback.max_bad_share:.0%}; "
            "the pipeline would quarantine the whole batch")
        return 1
    if dry_run:
        return 0

    prepare_home(settings)
    from dagster import DagsterInstance

    from ..automation.batches import batch_states, register_batches
    from ..automation.dead_runs import fail_dead_runs
    from ..automation.in_process import ingest_batch
    from ..definitions import build_definitions
    from .run import ingested

    defs = build_definitions(settings)
    instance = DagsterInstance.get()
    storage = defs.resources["storage"]
    key = layout.incoming(name)
    fail_dead_runs(instance, defs.resources["registry"])  # a run killed while landing it is not "landing"
    batch = batch_states(instance, [name], storage, settings)[name]
    if batch.state in ("landed", "quarantined") and landed_before is not None:
        say(landed_before)
        return 0
    if batch.state in ("landed", "quarantined"):
        raise ValueError(f"a batch named {name} has already landed; give new feedback a new file name")
    if batch.state == "landing":
        raise ValueError(f"a batch named {name} is already landing (run {batch.last_run_id}); wait for it")
    if storage.exists(key) and storage.read_bytes(key) not in (data, b""):  # empty: an original redacted away
        raise ValueError(f"another file named {name} waits in {storage.uri(layout.INCOMING)} to land; give this "
                         "feedback a new file name")
    storage.write_bytes(key, data)
    if batch.state == "new":
        register_batches(instance, [name])
    else:  # its ingest failed or died before: this is attempt batch.attempts + 1
        say(f"{name} did not land before ({batch.attempts} attempt(s)); ingesting it again")
    counts = ingest_batch(defs, instance, name, {"rmi/trigger": trigger})
    if counts.get("already_landing"):
        raise ValueError(f"a batch named {name} is already landing in another process; wait for it")
    if counts["failed"]:
        say(f"{name} did not land: its ingest run failed; `rmi ui` shows why, and the sensor tries it again")
        return 1
    say(f"landed {storage.uri(key)}; {ingested(counts)}")
    if counts["quarantined"]:
        say(f"quarantined rows and their reasons: {storage.uri(layout.quarantine(name))}")
    return 0


class Tool(StrEnum):
    langfuse = "langfuse"
    phoenix = "phoenix"
    otel = "otel"


class Source(StrEnum):
    auto = "auto"
    user = "user"
    report = "report"


def import_feedback(
    tool: Annotated[Tool, typer.Argument(help="Where the feedback was collected: langfuse (scores + traces), phoenix "
                                         "(annotations + spans), otel (OTLP JSON: evaluation events + spans).")],
    files: Annotated[list[Path], typer.Argument(help="The tool's export files (.json, .jsonl, .csv, .parquet, or "
                                                "their .gz), the scores and what they score, in any order.")],
    names: Annotated[str | None, typer.Option(help="Comma list: only scores (annotations, evaluations) of these "
                                              "names; default every one with a usable value.")] = None,
    threshold: Annotated[float | None, typer.Option(help="A numeric score at or above it is a thumbs-up, below a "
                                                    "thumbs-down; without it only 1 (up), 0 and -1 (down) "
                                                    "are.")] = None,
    up_labels: Annotated[str | None, typer.Option(help="Comma list of labels that mean a thumbs-up (replaces the "
                                                  "default list: docs/how-to/import-feedback.md).")] = None,
    down_labels: Annotated[str | None, typer.Option(help="Comma list of labels that mean a thumbs-down (replaces "
                                                    "the default list).")] = None,
    source: Annotated[Source, typer.Option(help="Every event's source; auto: user for people (annotations, an "
                                           "app's feedback), report for evaluators (LLM, code, evals).")] = Source.auto,
    model_version: Annotated[str | None, typer.Option(help="Every event's model_version; default the one the tool "
                                                      "recorded (the generation's model, the trace's version or "
                                                      "release).")] = None,
    anonymous_user: Annotated[str, typer.Option(help="user_id where the tool recorded no user.")] = "anonymous",
    output: Annotated[Path | None, typer.Option(help="Also write the converted batch here (a file, or a folder "
                                                "to write it in under its name).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Convert, validate and report only; land "
                                          "nothing.")] = False,
) -> int:
    """Turn feedback collected in Langfuse, Arize Phoenix or OpenTelemetry into a batch of schema v1 events and land
    it as `rmi feedback ingest` does, named after the tool and its content (langfuse-3f2a9c01b7de.jsonl), so the
    same export lands once. Every score is an event or skipped with its reason; the mapping:
    docs/how-to/import-feedback.md."""
    from ..schema.importers import DOWN_LABELS, UP_LABELS, Mapping, convert, labels

    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"not a file: {path}")
    if not anonymous_user.strip():
        raise ValueError("--anonymous-user must not be empty: every event names a user")
    mapping = Mapping(names=None if names is None else frozenset(n.strip() for n in names.split(",") if n.strip()),
                      threshold=threshold, up_labels=labels(up_labels, UP_LABELS),
                      down_labels=labels(down_labels, DOWN_LABELS),
                      source=None if source == Source.auto else source.value, model_version=model_version,
                      anonymous_user=anonymous_user)
    conversion = convert(tool.value, files, mapping)
    for line in conversion.summary():
        say(line)
    if not conversion.events:
        say("nothing to land: no score became an event")
        return 1
    name, data = conversion.batch_name(), conversion.jsonl()
    if output is not None:
        target = output / name if output.is_dir() else output
        target.write_bytes(data)
        say(f"wrote {target}")
    return land(name, data, dry_run, trigger=f"rmi-feedback-import-{tool.value}",
                landed_before=f"{name} has landed before: this export was imported already, nothing is new")


def stats(days: Annotated[int, typer.Option(min=1, help="Days of the per-day table, up to the latest.")] = 7,
          top: Annotated[int, typer.Option(min=1, help="Rows of the failing prompts and corrections.")] = 10) -> int:
    """Thumbs-down by model version, skill and tier (per day), the most failed prompts and the latest corrections."""
    from ..resources import build_resources

    settings = Settings()
    warehouse = build_resources(settings)["warehouse"]
    total = int(_frame(warehouse, "SELECT count(*) AS n FROM feedback_events")["n"][0])
    if not total:
        say(f"no feedback in the warehouse yet ({settings.resolved_warehouse_path})")
        return 0
    say(f"{total} feedback events in {settings.resolved_warehouse_path}\n")
    sections = [
        ("thumbs-down by model version and skill", "SELECT * FROM feedback_quality"),
        (f"per day (UTC), the last {days} days with feedback, by model version, skill and tier",
         f"SELECT * FROM feedback_daily WHERE day > (SELECT max(day) FROM feedback_daily) - {int(days)}"),
        (f"top {top} failing prompts", f"SELECT * EXCLUDE (last_seen) FROM failing_prompts LIMIT {int(top)}"),
        (f"latest {top} corrections", "SELECT ts, model_version, skill, tier, prompt, completion, correction "
                                           f"FROM feedback_corrections LIMIT {int(top)}"),
    ]
    for title, sql in sections:
        say(f"{title}\n{table(_frame(warehouse, sql))}\n")
    return 0


def forget(
    user: Annotated[str | None, typer.Option("--user", help="The user whose feedback is deleted, as events carry "
                                             "it in user_id.")] = None,
    reason: Annotated[str, typer.Option(help="Why (the request, a ticket): kept in the audit entry, with the "
                                        "user's id replaced.")] = "",
    pending: Annotated[bool, typer.Option("--pending", help="Only complete the deletions asked for before (through "
                                          "the gateway, Slack or a run that was stopped).")] = False,
) -> int:
    """Delete a user's feedback from every store: the warehouse (its files and history too), the batch files, the
    gateway's log, training datasets, practice rows and mined eval items; say which model versions were trained on
    it. Each deletion is a request first, completed step by step: one stopped half way is completed by the next
    `rmi feedback forget`. What it removes and its limits: docs/how-to/personal-data.md."""
    import getpass

    from ..privacy.forget import complete_pending, forget_user

    settings = Settings()
    if pending == (user is not None):
        raise ValueError("name a user (--user ID --reason TEXT), or --pending to complete earlier requests")
    if user is not None and not user.strip():
        raise ValueError("--user must not be empty")
    if user is not None and not reason.strip():
        raise ValueError("--reason is required: a deletion without one is not auditable")
    prepare_home(settings)
    if pending:
        audits = complete_pending(settings)
        say(f"{len(audits)} pending deletion(s) completed" if audits else "no deletion was pending")
    else:
        audits = [forget_user(settings, user, by=f"cli:{getpass.getuser()}", via="cli", reason=reason)]
    for audit in audits:
        say(deletion_report(audit))
    return 0


def deletion_report(audit: dict) -> str:
    """A completed deletion in words: what was removed per store, and the models that learned from it."""
    what = "one user's feedback" if audit["kind"] == "user" else f"feedback older than {audit['older_than'][:16]}"
    lines = [f"deleted {what} (request {audit['request_id']}, after {audit['attempts']} run(s)):"]
    removed = {k: v for k, v in audit["removed"].items() if v}
    lines += [f"  {name.replace('_', ' '):<26} {n:>8}" for name, n in removed.items()] or ["  nothing was found"]
    if audit["datasets_changed"]:
        lines.append(f"datasets rewritten without their rows: {', '.join(audit['datasets_changed'])}")
    if audit["models_trained_on_it"]:
        lines.append("model versions that learned from it (they keep what they learned: retrain or keep them, as "
                     "your policy says):")
        lines += [f"  v{m['version']}{' (' + ', '.join(m['aliases']) + ')' if m['aliases'] else ''}: {m['because']}"
                  for m in audit["models_trained_on_it"]]
    lines.append(f"audit entry: privacy/audit/{audit['request_id']}.json in the object store")
    return "\n".join(lines)


def _frame(warehouse, sql: str):
    """A read-only query; a warehouse written before these views is brought up to date once."""
    import duckdb

    try:
        return warehouse.query(sql)
    except duckdb.CatalogException:
        warehouse.migrate()
        return warehouse.query(sql)


def _top_reasons(quarantined: list[dict], n: int = 5) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for q in quarantined:
        counts[q["reason"]] = counts.get(q["reason"], 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])[:n]


def table(frame) -> str:
    """A polars frame as a small aligned text table: rates as percents, long text cut to CELL characters."""
    if frame.is_empty():
        return "  (none)"

    def cell(column: str, value) -> str:
        if value is None:
            return "-"
        if column.endswith("_rate"):
            return f"{value:.1%}"
        text = str(value).replace("\n", " ")
        return text if len(text) <= CELL else text[:CELL - 1] + "…"

    head = frame.columns
    rows = [[cell(c, v) for c, v in zip(head, r, strict=True)] for r in frame.rows()]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = lambda cells: "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])
