"""Read a feedback batch file into rows, and judge them with the expectation suite.

Feedback text is untrusted data: it is parsed as JSON (or read from Parquet) and never executed. This module only
does what must happen before a row exists (gzip, UTF-8, JSON per line, Parquet, fields into typed columns, meta
as JSON text); what a valid row is, the expectation suite in expectations.py decides. Every input row comes out
once: as an event, a duplicate or quarantined with its reasons, so the counts always add up.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .fields import EVENT_COLUMNS, FIELDS, SCHEMA_VERSION, STAGING, TEXT_FIELDS, TYPED, staging_schema

KNOWN = set(FIELDS)
BOM = b"\xef\xbb\xbf"  # editors on Windows start files with it; it is not part of the first row
SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # a JSON escape that may leave a lone surrogate no database takes
CHUNK = 100_000  # JSON rows turned into columns at a time: a million parsed dicts at once would take gigabytes


@dataclass
class Rows:
    """A batch file read into rows for the suite, and the rows that never became one."""

    table: object  # a pyarrow Table with expectations.STAGING columns, one row per record
    unparsed: list[dict] = field(default_factory=list)  # {"row": n, "reason": ...}
    raw: Callable[[int], str] = lambda row: ""  # the input text of a row, for quarantine


@dataclass
class ParsedBatch:
    frame: object  # the valid events: a polars frame with the warehouse's columns, in input order
    quarantined: list[dict] = field(default_factory=list)  # {"row": n, "reason": ..., "raw": ...}
    duplicates: int = 0  # repeated event_id inside this batch (first one kept)
    failed_expectations: dict[str, int] = field(default_factory=dict)  # expectation -> rows failing it
    expectations_evaluated: int = 0
    unparsed: int = 0  # quarantined before the suite: they never became a row

    @property
    def events(self) -> list[dict]:
        return [{**e, "ts": e["ts"].astimezone(UTC)} for e in self.frame.to_dicts()]

    @property
    def rows_in(self) -> int:
        return self.frame.height + len(self.quarantined) + self.duplicates


def parse_batch(name: str, data: bytes, batch_id: str | None, max_text_chars: int,
                cache_dir: Path | None = None, by_row: bool = False) -> ParsedBatch:
    """Every non-blank line (or Parquet row) comes out once: as an event, a duplicate or quarantined.

    `cache_dir` keeps the suite's compiled rules between processes (see expectations.compiled_rules); `by_row`
    reads JSON lines with the reference path alone (see read_rows)."""
    from .expectations import check

    rows = read_rows(name, data, by_row)
    out = ParsedBatch(frame=event_frame([]), quarantined=list(rows.unparsed), unparsed=len(rows.unparsed))
    if rows.table.num_rows:
        checked = check(rows.table, batch_id, max_text_chars, cache_dir)
        out.frame, out.duplicates = checked.events, checked.duplicates
        out.quarantined += checked.quarantined
        out.failed_expectations, out.expectations_evaluated = checked.failed, checked.evaluated
    out.quarantined.sort(key=lambda q: q["row"])
    for q in out.quarantined:
        q["raw"] = rows.raw(q["row"])[:max_text_chars]
    return out


def read_rows(name: str, data: bytes, by_row: bool = False) -> Rows:
    """A zero-byte file has no rows, whatever its format; an unreadable one is one quarantined row.

    JSON lines are read in bulk (jsonl.py) with the odd lines row by row; `by_row` reads every line row by row,
    the reference the bulk route must agree with exactly (tests/test_schema_bulk.py)."""
    if not data:
        return Rows(_table({}, 0))
    if name.endswith(".parquet"):
        return _parquet_rows(data)
    if name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            return Rows(_table({}, 0), [{"row": 1, "reason": f"unreadable gzip: {exc}"}])
    return _jsonl_rows_by_row(data) if by_row else _jsonl_rows(data)


def _jsonl_rows(data: bytes) -> Rows:
    """The plain lines through DuckDB, the others through _line_rows: the rows and reasons of the reference."""
    import pyarrow as pa

    from .jsonl import plain_rows, split_lines

    lines = split_lines(data.removeprefix(BOM))
    table, odd = plain_rows(lines)
    unparsed = []
    if len(odd):
        rest = _line_rows([lines.line(row) for row in odd.tolist()], odd.tolist(), unparsed)
        if rest.num_rows:
            table = pa.concat_tables([table, rest]).sort_by("row")
    return Rows(table, unparsed, lambda row: lines.line(row).decode("utf-8", "replace"))


def _jsonl_rows_by_row(data: bytes) -> Rows:
    lines = [line for line in data.removeprefix(BOM).split(b"\n") if line.strip()]
    unparsed = []
    table = _line_rows(lines, range(1, len(lines) + 1), unparsed)
    return Rows(table, unparsed, lambda row: lines[row - 1].decode("utf-8", "replace"))


def _line_rows(lines: list[bytes], numbers, unparsed: list[dict]):
    """Each line through Python's JSON parser, its staging row or why it has none (into `unparsed`)."""
    import pyarrow as pa

    chunks, records, kept = [], [], []
    for row, line in zip(numbers, lines, strict=True):
        try:
            record = _DECODER.decode(line.decode("utf-8"))
        except UnicodeDecodeError:
            unparsed.append({"row": row, "reason": "invalid UTF-8"})
            continue
        except json.JSONDecodeError as exc:
            unparsed.append({"row": row, "reason": f"malformed JSON: {exc.msg}"})
            continue
        except RecursionError:  # a hostile or broken client can nest arrays deeper than Python's stack
            unparsed.append({"row": row, "reason": "malformed JSON: nested too deeply"})
            continue
        if type(record) is not dict:
            unparsed.append({"row": row, "reason": "not a JSON object"})
            continue
        if SURROGATE.search(line) and (reason := _lone_surrogate(record)):
            unparsed.append({"row": row, "reason": reason})
            continue
        records.append(record)
        kept.append(row)
        if len(records) == CHUNK:
            chunks.append(_record_table(records, kept, unparsed))
            records, kept = [], []
    chunks.append(_record_table(records, kept, unparsed))
    return pa.concat_tables(chunks)


def _parquet_rows(data: bytes) -> Rows:
    import polars as pl

    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: B036 - polars raises a Rust panic (a BaseException) on some garbage
        return Rows(_table({}, 0), [{"row": 1, "reason": f"unreadable parquet: {str(exc)[:200]}"}])

    def raw(row: int) -> str:
        return json.dumps(frame.row(row - 1, named=True), default=str)

    if set(frame.columns) <= KNOWN and _plain_meta(frame.get_column("meta") if "meta" in frame.columns else None):
        return Rows(_frame_table(frame), [], raw)
    unparsed, chunks = [], []  # unknown columns (kept in meta) or an unusual meta: row by row, like JSON
    for start in range(0, max(frame.height, 1), CHUNK):
        part = frame.slice(start, CHUNK)
        chunks.append(_record_table(part.to_dicts(), list(range(start + 1, start + part.height + 1)), unparsed))
    import pyarrow as pa

    return Rows(pa.concat_tables(chunks), unparsed, raw)


def _record_table(records: list[dict], numbers: list[int], unparsed: list[dict]):
    """Parsed JSON objects as staging columns: each field's value where it has the schema's type, else null
    (and, for optional fields, the JSON type it had, so that the suite can tell null from a wrong type)."""
    kept, rows, metas, meta_types = [], [], [], []
    for record, row in zip(records, numbers, strict=True):
        meta = record.get("meta")
        extra = () if record.keys() <= KNOWN else record.keys() - KNOWN
        merged = ({**(meta if type(meta) is dict else {}), **{k: record[k] for k in extra}} if extra
                  else meta if type(meta) is dict else None)
        try:
            text = _META.encode(merged) if merged else None
        except ValueError:
            unparsed.append({"row": row, "reason": "meta holds NaN or Infinity, which JSON cannot carry"})
            continue
        except RecursionError:
            unparsed.append({"row": row, "reason": "meta is nested too deeply"})
            continue
        kept.append(record)
        rows.append(row)
        metas.append(text)
        meta_types.append(None if meta is None or type(meta) is dict else _json_type(meta))
    columns = {"row": rows, "meta": metas, "meta_type": meta_types}
    versions = [r.get("schema_version", SCHEMA_VERSION) for r in kept]
    columns["schema_version"] = [v if type(v) is int and -(2**63) <= v < 2**63 else None for v in versions]
    stamps = [r.get("ts") for r in kept]
    columns["ts_text"] = [v if type(v) is str else v.isoformat() if type(v) is datetime and v.tzinfo is None
                          else None for v in stamps]
    columns["ts_value"] = [v if type(v) is datetime and v.tzinfo is not None else None for v in stamps]
    for name in TEXT_FIELDS:
        values = [r.get(name, "user") for r in kept] if name == "source" else [r.get(name) for r in kept]
        columns[name] = [v if type(v) is str else None for v in values]
        if name in TYPED:
            columns[f"{name}_type"] = [None if v is None or type(v) is str else _json_type(v) for v in values]
    return _table(columns, len(kept))


def _table(columns: dict, n: int):
    import pyarrow as pa

    schema = staging_schema()
    return pa.table({name: pa.array(columns.get(name, [None] * n), type=schema.field(name).type)
                     for name in schema.names}, schema=schema)


def _frame_table(frame):
    """A Parquet frame with only schema fields as staging columns, column by column (no Python per row)."""
    import polars as pl

    def column(name: str, default=None):
        return pl.col(name) if name in frame.columns else pl.lit(default, dtype=pl.String)

    def json_type(name: str):  # the JSON type a non-string column holds, where a row has a value
        kind = frame.schema.get(name)
        if kind is None or kind in (pl.String, pl.Null):
            return pl.lit(None, dtype=pl.String)
        return pl.when(pl.col(name).is_not_null()).then(pl.lit(_dtype_json_type(kind)))

    def text(name: str):
        kind = frame.schema.get(name)
        if kind is None:
            return pl.lit("user" if name == "source" else None, dtype=pl.String)
        return column(name).cast(pl.String) if kind in (pl.String, pl.Null) else pl.lit(None, dtype=pl.String)

    version, stamp, meta = (frame.schema.get(n) for n in ("schema_version", "ts", "meta"))
    utc = pl.Datetime("us", "UTC")
    exprs = [
        pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("row"),
        (pl.lit(SCHEMA_VERSION, dtype=pl.Int64) if version is None else pl.col("schema_version").cast(
            pl.Int64, strict=False) if version.is_integer() else pl.lit(None, dtype=pl.Int64)).alias("schema_version"),
        (pl.col("ts").cast(pl.String) if stamp in (pl.String, pl.Null)
         else pl.col("ts").dt.to_string("%Y-%m-%dT%H:%M:%S%.f") if isinstance(stamp, pl.Datetime) and not
         stamp.time_zone else pl.lit(None, dtype=pl.String)).alias("ts_text"),
        (pl.col("ts").dt.convert_time_zone("UTC").cast(utc) if isinstance(stamp, pl.Datetime) and stamp.time_zone
         else pl.lit(None, dtype=utc)).alias("ts_value"),
        *[text(name).alias(name) for name in TEXT_FIELDS],
        (pl.when(pl.col("meta").is_not_null()).then(pl.col("meta").struct.json_encode())
         if isinstance(meta, pl.Struct) else pl.lit(None, dtype=pl.String)).alias("meta"),
        *[json_type(name).alias(f"{name}_type") for name in TYPED],
    ]
    if not frame.height:
        return _table({}, 0)
    return frame.select(exprs).select(list(STAGING)).to_arrow(compat_level=pl.CompatLevel.newest())  # no copy


def _plain_meta(column) -> bool:
    """A meta column the fast path can turn into JSON as it is: absent, all null, or a struct of strings, booleans,
    integers and finite floats (polars would write NaN as null, where the row path quarantines it)."""
    import polars as pl

    if column is None or column.dtype == pl.Null:
        return True
    if isinstance(column.dtype, pl.Struct):
        fields = [column.struct.field(f.name) for f in column.dtype.fields]
        return all(_plain_meta(f) or f.dtype in (pl.String, pl.Boolean) or f.dtype.is_integer()
                   or (f.dtype.is_float() and bool(f.is_finite().fill_null(True).all())) for f in fields)
    return False


def _dtype_json_type(kind) -> str:
    import polars as pl

    if kind == pl.Boolean:
        return "boolean"
    if kind.is_integer():
        return "integer"
    if kind.is_float():
        return "number"
    if isinstance(kind, pl.List | pl.Array):
        return "array"
    if isinstance(kind, pl.Struct):
        return "object"
    if kind.is_temporal():
        return "timestamp"
    return str(kind)


def _json_type(value) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
            datetime: "timestamp"}.get(type(value), type(value).__name__)


def _not_json(constant: str):
    """Python's json accepts NaN and Infinity; JSON (and the warehouse's JSON column) does not."""
    raise json.JSONDecodeError(f"{constant} is not JSON", constant, 0)


_DECODER = json.JSONDecoder(parse_constant=_not_json)
_META = json.JSONEncoder(default=str, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _lone_surrogate(record: dict) -> str | None:
    """A JSON escape such as "\\ud800" decodes to text no database can store: the row cannot exist."""
    for name, value in record.items():
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            where = name if name in KNOWN else "meta"  # unknown fields are kept in meta
            return f"{where} is not valid Unicode (a lone surrogate)"
        if not name.isascii():
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                return "meta is not valid Unicode (a lone surrogate)"
    return None


def event_frame(events: list[dict]):
    """Events as a polars frame with the warehouse's column types (empty batches included)."""
    import polars as pl

    types = {"VARCHAR": pl.String, "JSON": pl.String, "INTEGER": pl.Int64, "TIMESTAMPTZ": pl.Datetime("us", "UTC")}
    return pl.DataFrame(events, schema={name: types[kind] for name, kind in EVENT_COLUMNS.items()})
