"""Feedback event schema v1: parse a batch file into valid events and quarantined rows with reasons.

Feedback text is untrusted data: it is parsed as JSON (or read from Parquet) and never executed.
Every input row comes out either as an event or as a quarantined row, so the counts always add up.
"""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

SCHEMA_VERSION = 1
SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")
TEXT_FIELDS = ("prompt", "completion", "correction", "comment")
KNOWN = {"schema_version", "event_id", "ts", "user_id", "model_version", "prompt", "completion", "rating",
         "correction", "comment", "source", "skill", "meta"}
REQUIRED_STRINGS = ("event_id", "user_id", "model_version", "prompt", "completion")
RATINGS = {"up", "down", None}
SOURCES = {"user", "report"}
MAX_CLOCK_SKEW = timedelta(days=1)


@dataclass
class ParsedBatch:
    events: list[dict] = field(default_factory=list)
    quarantined: list[dict] = field(default_factory=list)  # {"row": n, "reason": ..., "raw": ...}
    duplicates: int = 0  # repeated event_id inside this batch (first one kept)

    @property
    def rows_in(self) -> int:
        return len(self.events) + len(self.quarantined) + self.duplicates


def is_batch_file(name: str) -> bool:
    return name.endswith(SUFFIXES) and not name.startswith(".")


def parse_batch(name: str, data: bytes, batch_id: str, max_text_chars: int) -> ParsedBatch:
    out = ParsedBatch()
    seen: set[str] = set()
    for row, (raw, record) in enumerate(_records(name, data), start=1):
        event, reason = (None, record) if isinstance(record, str) else validate(record, max_text_chars)
        if event is None:
            out.quarantined.append({"row": row, "reason": reason, "raw": raw[:max_text_chars]})
        elif event["event_id"] in seen:
            out.duplicates += 1
        else:
            seen.add(event["event_id"])
            event["batch_id"] = batch_id
            out.events.append(event)
    return out


def _records(name: str, data: bytes):
    """(raw text, dict or reason string) per input row."""
    if name.endswith(".parquet"):
        import polars as pl

        try:
            rows = pl.read_parquet(io.BytesIO(data)).to_dicts()
        except Exception as exc:  # an unreadable file is one quarantined row, not a crash
            yield "", f"unreadable parquet: {exc}"
            return
        for r in rows:
            yield json.dumps(r, default=str), r
        return
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            yield "", f"unreadable gzip: {exc}"
            return
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            yield line.decode("utf-8", "replace"), "invalid UTF-8"
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            yield text, f"malformed JSON: {exc.msg}"
            continue
        yield text, record if isinstance(record, dict) else "not a JSON object"


def validate(record: dict, max_text_chars: int) -> tuple[dict | None, str | None]:
    """A normalized event, or None and the reason it is quarantined."""
    version = record.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        return None, f"schema_version must be an integer, got {version!r}"
    if version > SCHEMA_VERSION:
        return None, f"schema_version {version} is newer than this pipeline understands ({SCHEMA_VERSION})"
    for name in REQUIRED_STRINGS:
        value = record.get(name)
        if not isinstance(value, str) or (name == "event_id" and not value.strip()):
            return None, f"{name} must be a non-empty string" if name == "event_id" else f"{name} must be a string"
    for name in ("correction", "comment", "skill"):
        if record.get(name) is not None and not isinstance(record[name], str):
            return None, f"{name} must be a string or null"
    for name in TEXT_FIELDS:
        value = record.get(name)
        if isinstance(value, str) and len(value) > max_text_chars:
            return None, f"{name} too long: {len(value)} chars > {max_text_chars}"
    if record.get("rating") not in RATINGS:
        return None, f"rating must be 'up', 'down' or null, got {record.get('rating')!r}"
    if record.get("source", "user") not in SOURCES:
        return None, f"source must be 'user' or 'report', got {record.get('source')!r}"
    ts, reason = _timestamp(record.get("ts"))
    if reason:
        return None, reason
    meta = record.get("meta") or {}
    if not isinstance(meta, dict):
        return None, "meta must be an object"
    extra = {k: v for k, v in record.items() if k not in KNOWN}
    return {
        "event_id": record["event_id"],
        "schema_version": version,
        "ts": ts,
        "user_id": record["user_id"],
        "model_version": record["model_version"],
        "prompt": record["prompt"],
        "completion": record["completion"],
        "rating": record.get("rating"),
        "correction": record.get("correction"),
        "comment": record.get("comment"),
        "source": record.get("source", "user"),
        "skill": record.get("skill"),
        "meta": json.dumps({**meta, **extra}, default=str) if (meta or extra) else None,
    }, None


def _timestamp(value) -> tuple[datetime | None, str | None]:
    if isinstance(value, datetime):  # Parquet carries real timestamps
        ts = value
    elif isinstance(value, str):
        try:
            ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None, f"ts is not RFC 3339: {value[:40]!r}"
    else:
        return None, "ts must be an RFC 3339 string"
    if ts.tzinfo is None:
        return None, "ts has no time zone"
    ts = ts.astimezone(UTC)
    if ts > datetime.now(UTC) + MAX_CLOCK_SKEW:
        return None, "ts is in the future"
    return ts, None


def event_frame(events: list[dict]):
    """Events as a polars frame with the warehouse's column types (empty batches included)."""
    import polars as pl

    text = pl.Utf8
    schema = {"event_id": text, "schema_version": pl.Int64, "ts": pl.Datetime("us", "UTC"), "user_id": text,
              "model_version": text, "prompt": text, "completion": text, "rating": text, "correction": text,
              "comment": text, "source": text, "skill": text, "meta": text, "batch_id": text}
    return pl.DataFrame(events, schema=schema)
