"""JSON lines in bulk: the plain lines decoded by DuckDB, every odd line left to parse.py's row-by-row path.

Python's JSON parser limits a batch to about 65k lines/s. Most lines are plain: an object of schema fields whose
values are strings or null (schema_version an integer, meta a flat object of plain values), in JSON that any
parser reads the same way. A regular expression over all lines at once (polars) tells the plain lines; DuckDB
turns them into staging columns in one pass. Any other line, whatever is odd about it (invalid UTF-8, NaN, a
trailing comma, nesting, a lone surrogate, an unknown field, a repeated key, a wrong type, a float in meta),
goes to the row-by-row path, so that its staging row or its quarantine reason is exactly the one that path gives.
tests/test_schema_bulk.py checks that both routes agree on files full of hostile lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .fields import FIELDS, SCHEMA_VERSION, STAGING, TYPED, staging_schema

BLANK = b" \t\r\x0b\x0c"  # what bytes.strip() removes (besides the newline the lines are split on)
WS = r"[ \t\r\n]*"  # JSON's whitespace
# a JSON string; an escaped lone surrogate takes the row-by-row path, which names it
STRING = (r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2})'
          r'|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})*"')
INTEGER = r"(?:-?[1-9][0-9]{0,17}|0)"  # fits a BIGINT as written ("-0" and wider integers: row by row)
SCALAR = f"(?:{STRING}|{INTEGER}|true|false|null)"  # no float: DuckDB and Python write those differently
FLAT = rf"\{{{WS}(?:{STRING}{WS}:{WS}{SCALAR}(?:{WS},{WS}{STRING}{WS}:{WS}{SCALAR})*)?{WS}\}}"


def _member(name: str) -> str:
    """One field as the fast path takes it. Its key is followed by the colon at once, so that a line without
    the text `"key":` has no such field (with it, a meta key may be all there is: json_exists tells)."""
    value = INTEGER if name == "schema_version" else FLAT if name == "meta" else STRING
    return f'"{name}":{WS}(?:{value}|null)'


def _object(body: str) -> str:
    return rf"^{WS}\{{{WS}(?:{body})?{WS}\}}{WS}$"


MEMBERS = [_member(name) for name in FIELDS]
# the fields in the schema's order, any of them left out: no key can repeat
IN_ORDER = _object("|".join(m + "".join(f"(?:{WS},{WS}{n})?" for n in MEMBERS[i + 1:])
                            for i, m in enumerate(MEMBERS)))
# the fields in any order: DuckDB checks these for a repeated key
ANY_ORDER = _object(f"(?:{'|'.join(MEMBERS)})(?:{WS},{WS}(?:{'|'.join(MEMBERS)}))*")


@dataclass
class Lines:
    """The non-blank lines of a JSON lines file (the BOM already removed): row n is line `index[n - 1]`."""

    data: bytes
    starts: object  # numpy int64: where each line of the file starts (blank ones included), and its end
    ends: object
    index: object  # numpy int64: the file's lines that are rows, in order

    def __len__(self) -> int:
        return len(self.index)

    def line(self, row: int) -> bytes:
        i = self.index[row - 1]
        return self.data[self.starts[i]:self.ends[i]]


def split_lines(data: bytes) -> Lines:
    """Lines as bytes.split(b"\\n") gives them, and which are rows: those bytes.strip() leaves non-empty."""
    import numpy as np

    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], newlines + 1)).astype(np.int64)
    ends = np.concatenate((newlines, [len(data)])).astype(np.int64)
    filled = ends > starts
    first = np.zeros(len(starts), dtype=np.uint8)
    first[filled] = buf[starts[filled]]
    blank = np.zeros(256, dtype=bool)
    blank[list(BLANK)] = True
    rows = filled & ~blank[first]
    for i in np.flatnonzero(filled & ~rows):  # starts with a space: blank only if nothing else is there
        rows[i] = bool(data[starts[i]:ends[i]].strip())
    return Lines(data, starts, ends, np.flatnonzero(rows))


def plain_rows(lines: Lines):
    """(staging rows of the plain lines as an Arrow table, in order; the numbers of the other rows)."""
    import numpy as np
    import polars as pl
    import pyarrow as pa

    rows = np.arange(1, len(lines) + 1, dtype=np.int64)
    data, valid = _utf8(lines)
    # row n's text runs to where row n + 1 starts: what lies between is a newline and blank lines
    offsets = np.append(lines.starts[lines.index], lines.ends[lines.index[-1]] if len(lines) else 0)
    text = pa.LargeStringArray.from_buffers(len(lines), pa.py_buffer(offsets), pa.py_buffer(data))
    series = pl.Series("line", text)
    in_order = _matches(series, IN_ORDER)
    plain = in_order & valid
    if not plain.all():  # the rest in any order, for DuckDB to check for a repeated key
        rest = ~in_order & valid
        plain[rest] = _matches(series.filter(pl.Series(rest)), ANY_ORDER)
    staged = _decode(pa.table({"row": rows, "in_order": in_order, "plain": plain, "line": text}))
    odd = staged.column("odd").to_numpy(zero_copy_only=False)
    if odd.any():
        staged = staged.filter(pa.array(~odd))
    fast = np.zeros(len(lines) + 1, dtype=bool)
    fast[staged.column("row").to_numpy()] = True
    return staged.drop_columns(["odd"]), rows[~fast[1:]]


def _matches(series, pattern: str):
    """Which lines match, on every core: one polars expression runs on one thread."""
    import polars as pl

    step = -(-len(series) // pl.thread_pool_size()) or 1
    parts = [pl.LazyFrame({"line": series.slice(start, step)}).select(pl.col("line").str.contains(pattern))
             for start in range(0, max(len(series), 1), step)]
    return pl.concat(parts).collect().to_series().to_numpy()


def _utf8(lines: Lines):
    """(the text with every row that is not UTF-8 blanked, which rows are): such a row keeps its reason from the
    row-by-row path, and no string column ever holds it."""
    import numpy as np

    data = lines.data
    if data.isascii():  # far faster than decoding, and most files are
        return data, np.ones(len(lines), dtype=bool)
    try:
        data.decode("utf-8")
        return data, np.ones(len(lines), dtype=bool)
    except UnicodeDecodeError:
        pass
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, ends = lines.starts[lines.index], lines.ends[lines.index]
    valid = np.ones(len(lines), dtype=bool)
    clean = bytearray(data)
    for n in np.flatnonzero(np.maximum.reduceat(buf, starts) >= 0x80):  # rows with a byte beyond ASCII
        try:
            data[starts[n]:ends[n]].decode("utf-8")
        except UnicodeDecodeError:
            valid[n] = False
            clean[starts[n]:ends[n]] = b" " * int(ends[n] - starts[n])
    return bytes(clean), valid


def _decode(table):
    """Staging columns from the plain lines in one DuckDB pass; `odd` marks the few that still need Python: a
    repeated key (Python keeps the last), in the line or in meta, or meta text DuckDB writes with an escape (a
    quote, a backslash, a control character: written back without one, it is byte for byte what Python writes)."""
    import pyarrow as pa

    struct = "{" + ", ".join(f'"{n}": "{"BIGINT" if n == "schema_version" else "VARCHAR"}"' for n in FIELDS) + "}"

    def present(name: str, default: str) -> str:
        """The value, or the default where the key is absent (null and absent both come out NULL)."""
        return (f"CASE WHEN v.{name} IS NOT NULL THEN v.{name} "
                f"WHEN NOT contains(line, '\"{name}\":') OR NOT json_exists(line, '$.{name}') THEN {default} END")

    columns = {name: f"v.{name}" for name in STAGING}
    columns |= {"row": "row", "schema_version": present("schema_version", str(SCHEMA_VERSION)), "ts_text": "v.ts",
                "ts_value": "NULL::TIMESTAMPTZ", "source": present("source", "'user'"),
                "meta": "CASE WHEN v.meta <> '{}' THEN v.meta END",
                **{f"{name}_type": "NULL::VARCHAR" for name in TYPED}}
    odd = ("CASE WHEN NOT in_order AND len(json_keys(line)) <> len(list_distinct(json_keys(line))) THEN true "
                "WHEN contains(v.meta, '\\') THEN true "
                "WHEN contains(v.meta, ',') THEN len(json_keys(v.meta)) <> len(list_distinct(json_keys(v.meta))) "
                "ELSE false END")
    select = ", ".join(f"{sql} AS {name}" for name, sql in columns.items())
    conn = _database().cursor()
    try:
        conn.execute("SET TimeZone = 'UTC'")
        conn.register("plain_lines", table)
        out = conn.sql(f"SELECT {select}, {odd} AS odd FROM (SELECT row, in_order, line, "
                       f"json_transform(line, '{struct}') AS v FROM plain_lines WHERE plain)").to_arrow_table()
    finally:
        conn.close()
    schema = staging_schema().append(pa.field("odd", pa.bool_()))
    return out.select(schema.names).cast(schema)


@lru_cache(maxsize=1)
def _database():
    import duckdb

    return duckdb.connect()
