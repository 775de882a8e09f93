"""Feedback event schema v1: parse a batch file into valid events and quarantined rows with reasons.

Feedback text is untrusted data: it is parsed as JSON (or read from Parquet) and never executed.
Every input row comes out either as an event or as a quarantined row, so the counts always add up.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

SCHEMA_VERSION = 1
SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")
KNOWN = {"schema_version", "event_id", "ts", "user_id", "model_version", "prompt", "completion", "rating",
         "correction", "comment", "source", "skill", "meta"}
REQUIRED_STRINGS = ("event_id", "user_id", "model_version", "prompt", "completion")
OPTIONAL_STRINGS = ("correction", "comment", "skill")
BOM = b"\xef\xbb\xbf"  # editors on Windows start files with it; it is not part of the first row
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
    """Every non-blank line (or Parquet row) comes out once: as an event, a duplicate or quarantined."""
    out = ParsedBatch()
    seen: set[str] = set()
    for row, (raw, record) in enumerate(_records(name, data), start=1):
        event, reason = (None, record) if isinstance(record, str) else _validate_safely(record, max_text_chars)
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
    """(raw text, dict or reason string) per input row; a zero-byte file has no rows, whatever its format."""
    if not data:
        return
    if name.endswith(".parquet"):
        yield from _parquet_records(data)
        return
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            yield "", f"unreadable gzip: {exc}"
            return
    for line in data.removeprefix(BOM).split(b"\n"):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            yield line.decode("utf-8", "replace"), "invalid UTF-8"
            continue
        try:
            record = json.loads(text, parse_constant=_not_json)
        except json.JSONDecodeError as exc:
            yield text, f"malformed JSON: {exc.msg}"
            continue
        except RecursionError:  # a hostile or broken client can nest arrays deeper than Python's stack
            yield text, "malformed JSON: nested too deeply"
            continue
        yield text, record if isinstance(record, dict) else "not a JSON object"


def _parquet_records(data: bytes):
    import polars as pl

    try:
        rows = pl.read_parquet(io.BytesIO(data)).to_dicts()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: B036 - polars raises a Rust panic (a BaseException) on some garbage
        yield "", f"unreadable parquet: {str(exc)[:200]}"  # one quarantined row, not a crash
        return
    for r in rows:
        yield json.dumps(r, default=str), r


def _not_json(constant: str):
    """Python's json accepts NaN and Infinity; JSON (and the warehouse's JSON column) does not."""
    raise json.JSONDecodeError(f"{constant} is not JSON", constant, 0)


def _validate_safely(record: dict, max_text_chars: int) -> tuple[dict | None, str | None]:
    """A row that trips a bug in validation is quarantined with the error, so one row never fails a batch."""
    try:
        return validate(record, max_text_chars)
    except Exception as exc:  # noqa: BLE001 - the reason names it; the batch goes on
        return None, f"could not validate: {type(exc).__name__}: {str(exc)[:200]}"


def validate(record: dict, max_text_chars: int) -> tuple[dict | None, str | None]:
    """A normalized event, or None and the reason it is quarantined."""
    version = record.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return None, f"schema_version must be a positive integer, got {_short(version)}"
    if version > SCHEMA_VERSION:
        return None, f"schema_version {version} is newer than this pipeline understands ({SCHEMA_VERSION})"
    for name in REQUIRED_STRINGS:
        value = record.get(name)
        if not isinstance(value, str) or (name == "event_id" and not value.strip()):
            return None, f"{name} must be a non-empty string" if name == "event_id" else f"{name} must be a string"
    for name in OPTIONAL_STRINGS:
        if record.get(name) is not None and not isinstance(record[name], str):
            return None, f"{name} must be a string or null"
    for name in (*REQUIRED_STRINGS, *OPTIONAL_STRINGS):
        reason = _text_problem(name, record.get(name), max_text_chars)
        if reason:
            return None, reason
    if not _is_one_of(record.get("rating"), RATINGS):
        return None, f"rating must be 'up', 'down' or null, got {_short(record.get('rating'))}"
    if not _is_one_of(record.get("source", "user"), SOURCES):
        return None, f"source must be 'user' or 'report', got {_short(record.get('source'))}"
    ts, reason = _timestamp(record.get("ts"))
    if reason:
        return None, reason
    meta = record.get("meta")
    if meta is not None and not isinstance(meta, dict):
        return None, "meta must be an object or null"
    meta_text, reason = _meta_json({**(meta or {}), **{k: v for k, v in record.items() if k not in KNOWN}},
                                   max_text_chars)
    if reason:
        return None, reason
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
        "meta": meta_text,
    }, None


def _short(value) -> str:
    return repr(value)[:60]


def _is_one_of(value, allowed: set) -> bool:
    return (value is None or isinstance(value, str)) and value in allowed  # a list or object is never a rating


def _text_problem(name: str, value, max_text_chars: int) -> str | None:
    """Oversized text is quarantined, never truncated; text that is not valid Unicode cannot be stored."""
    if not isinstance(value, str):
        return None
    if len(value) > max_text_chars:
        return f"{name} too long: {len(value)} chars > {max_text_chars}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # JSON may escape a lone surrogate ("\\ud800"); no database takes it
        return f"{name} is not valid Unicode (a lone surrogate)"
    return None


def _meta_json(meta: dict, max_text_chars: int) -> tuple[str | None, str | None]:
    """meta plus unknown top-level fields as JSON text, or the reason it cannot be kept."""
    if not meta:
        return None, None
    try:
        text = json.dumps(meta, default=str, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return None, "meta holds NaN or Infinity, which JSON cannot carry"
    except RecursionError:
        return None, "meta is nested too deeply"
    reason = _text_problem("meta", text, max_text_chars)
    return (None, reason) if reason else (text, None)


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
    try:
        ts = ts.astimezone(UTC)
    except OverflowError:  # "0001-01-01T00:00:00+01:00" is before the first UTC instant Python can hold
        return None, f"ts is out of range: {str(value)[:40]!r}"
    if ts > datetime.now(UTC) + MAX_CLOCK_SKEW:
        return None, "ts is in the future"
    return ts, None


def event_frame(events: list[dict]):
    """Events as a polars frame with the warehouse's column types (empty batches included)."""
    import polars as pl

    text = pl.Utf8
    schema = {"event_id": text, "schema_version": pl.Int64, "ts": pl.Datetime("us", "UTC"), "user_id": text,
              "model_version": text, "prompt": text, "completion": text, "rating": text, "correction": text,
              "comment": text, "source": text, "skill": text, "meta": text, "batch_id": text, "tier": pl.Int64}
    return pl.DataFrame(events, schema=schema)
