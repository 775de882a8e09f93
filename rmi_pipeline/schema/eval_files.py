"""A team's eval files (RMI_EVAL_FILES), read and checked into items, their slices and a frozen held-out split.

One item per JSON line (.jsonl, .json), Parquet row (.parquet) or CSV row (.csv), any of them optionally .gz, read
through fsspec (a plain path, file://, s3://). Columns: `input` (a non-empty string), `target` (optional: a string,
null or absent; a JSON or Parquet number becomes its text, 4 -> "4", 2.50 -> "2.5", so write it as a string to keep
its exact form; an empty target is no target), `id` (optional, unique), and any others are metadata, with a JSON
`metadata` object merged in. The values of RMI_EVAL_SLICE_BY's columns, joined by "|", name an item's slice.

This is a pure reader: it writes nothing, and any problem raises one EvalFileError that lists every problem found
(file, line or row, field, reason), so that a person fixes the file in one go and nothing is ever half-sealed.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import unicodedata
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import PurePosixPath

from .parse import _DECODER, BOM

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}
FIELDS = ("input", "target", "id", "metadata")  # what is not one of these is metadata
JOIN = "|"  # between the slice_by values of a slice's name
SHOWN = 20  # problems an error's message lists; the rest are counted


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an eval file, where a person finds it: `line` is 1-based (a Parquet file's row)."""

    file: str
    line: int | None
    field: str | None
    reason: str
    unit: str = "line"

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}, {self.unit} {self.line}"
        return f"{where}: {self.field}: {self.reason}" if self.field else f"{where}: {self.reason}"


class EvalFileError(ValueError):
    """The eval files cannot be used as they are: every problem found, the first SHOWN of them in the message."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        rest = len(self.problems) - SHOWN
        super().__init__(f"{len(self.problems)} problem(s) in the eval files:\n"
                         + "\n".join(f"  {p}" for p in self.problems[:SHOWN])
                         + (f"\n  ... and {rest} more" if rest > 0 else ""))


@dataclass
class EvalItem:
    """One eval item; `digest` is the sha256 of canonical_input(input): duplicates and the split go by it."""

    input: str
    target: str | None
    slice: str
    metadata: dict
    source: str  # "file:line" (a Parquet file's row)
    held_out: bool
    id: str | None = None
    digest: str = ""


@dataclass
class EvalFiles:
    """What the files hold, checked: the items in file order, their slices' counts, and each file's hash."""

    items: list[EvalItem]
    slices: dict[str, dict]  # slice -> {"items", "counted", "held_out"}
    files: list[dict]  # {"url", "format", "rows", "sha256"} of the bytes as stored

    @property
    def counted(self) -> list[EvalItem]:
        return [item for item in self.items if not item.held_out]

    @property
    def held_out(self) -> list[EvalItem]:
        return [item for item in self.items if item.held_out]


def canonical_input(text: str) -> str:
    """Inputs that differ only in case, Unicode form or spacing ask the same thing: they are one item (duplicates)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def held_out_fraction(digest: str) -> float:
    """Where an item falls in [0, 1] by its digest alone (hygiene's mined split rule): re-reading never moves it."""
    return int(digest[:8], 16) / 0xFFFFFFFF


def read_eval_files(urls: Iterable[str], *, slice_by: Iterable[str] = (), min_slice_items: int = 20,
                    held_out_share: float = 0.25, storage_options: Mapping | None = None) -> EvalFiles:
    """The files' items, slices and split, or one EvalFileError with every problem in every file.

    An item is held out when its fraction is below `held_out_share`. Where that would leave a slice nothing to
    count, its item with the highest fraction is counted instead: the one exception to the hash, which moves back
    only if a new item of that slice lands on the counted side (a sealed suite is frozen, so it never does)."""
    urls, slice_by = list(urls), tuple(slice_by)
    if not urls:
        raise ValueError("no eval files given")
    problems: list[Problem] = []
    items: list[EvalItem] = []
    files: list[dict] = []
    first_input: dict[str, str] = {}  # canonical input -> source of its first row
    first_id: dict[str, str] = {}
    first_bytes: dict[str, str] = {}  # sha256 -> url
    for url in urls:
        kind, gz = _format(url)
        if kind is None:
            problems.append(Problem(url, None, None, "unknown format: name it .jsonl, .json, .parquet or .csv "
                                                     "(or any of them .gz)"))
            continue
        start = len(problems)
        data = _read(url, storage_options or {}, problems)
        if data is None:
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest in first_bytes:
            problems.append(Problem(url, None, None, f"the same bytes as {first_bytes[digest]} (given twice)"))
            continue
        first_bytes[digest] = url
        if gz:
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as exc:
                problems.append(Problem(url, None, None, f"not gzip: {exc}"))
                continue
        before = len(problems)
        rows, columns, skip = READERS[kind](url, data.removeprefix(BOM), problems)
        files.append({"url": url, "format": kind, "rows": len(rows), "sha256": digest})
        if not rows and len(problems) == before:
            problems.append(Problem(url, None, None, "the file has no items"))
        unit = "row" if kind == "parquet" else "line"
        if columns is not None:  # a table: a missing column is one problem, not one a row
            for name in ("input", *slice_by):
                if name not in columns and name not in skip:
                    what = "slice_by column" if name in slice_by else "column"
                    problems.append(Problem(url, None, name, f"no {what} {name!r} (columns: {sorted(columns)})"))
                    skip.add(name)
        for line, record in rows:
            item, good = _item(url, line, unit, record, slice_by, skip, problems)
            if item is None:
                continue
            repeated = False  # a row with other problems still names its duplicates: all are fixed in one go
            for key, first, what in ((item.digest, first_input, "input"), (item.id, first_id, "id")):
                if key is not None and key in first:
                    same = " (after case and spacing are normalized)" if what == "input" else ""
                    problems.append(Problem(url, line, what, f"the same {what} as {first[key]}{same}", unit))
                    repeated = True
                elif key is not None:
                    first[key] = item.source
            if good and not repeated:
                items.append(item)
        problems[start:] = sorted(problems[start:], key=lambda p: p.line or 0)  # as a person reads the file
    slices = _split(items, held_out_share)
    for name, counts in slices.items():
        if counts["items"] < min_slice_items:
            holders = ", ".join(dict.fromkeys(i.source.rsplit(":", 1)[0] for i in items if i.slice == name))
            problems.append(Problem(holders, None, JOIN.join(slice_by) or None,
                                    f"slice {name!r} has {counts['items']} good item(s); a slice needs at least "
                                    f"{min_slice_items} to be judged (RMI_EVAL_MIN_SLICE_ITEMS)"))
    if problems:
        raise EvalFileError(problems)
    return EvalFiles(items, slices, files)


def _split(items: list[EvalItem], share: float) -> dict[str, dict]:
    """Held out by hash; a slice the hash would leave nothing to count keeps its highest-fraction item counted."""
    by_slice: dict[str, list[EvalItem]] = {}
    for item in items:
        item.held_out = held_out_fraction(item.digest) < share
        by_slice.setdefault(item.slice, []).append(item)
    slices = {}
    for name in sorted(by_slice):
        members = by_slice[name]
        if all(item.held_out for item in members):
            max(members, key=lambda item: held_out_fraction(item.digest)).held_out = False
        held = sum(item.held_out for item in members)
        slices[name] = {"items": len(members), "counted": len(members) - held, "held_out": held}
    return slices


def _item(url: str, line: int, unit: str, record: dict, slice_by: tuple[str, ...], skip: set[str],
          problems: list[Problem]) -> tuple[EvalItem | None, bool]:
    """(the row as an item, whether it is good): each of its problems added, not only the first; no item where
    its input is not usable text."""
    found = len(problems)

    def bad(name: str | None, reason: str) -> None:
        problems.append(Problem(url, line, name, reason, unit))

    text = record.get("input")
    if "input" in skip:
        pass
    elif "input" not in record:
        bad("input", "no input field")
    elif type(text) is not str:
        bad("input", "empty (null)" if text is None else f"{_kind(text)}, not text")
    elif not text.strip():
        bad("input", "empty" if not text else "only whitespace")
    elif not _unicode(text):
        bad("input", "not valid Unicode (a lone surrogate)")
    target = _text(record.get("target"), "target", bad)
    if target is not None and not target.strip():
        target = None
    ident = _text(record.get("id"), "id", bad)
    metadata = {k: _plain(v) for k, v in record.items() if k not in FIELDS}
    inner = record.get("metadata")
    if isinstance(inner, dict):
        for key, value in inner.items():
            value = _plain(value)
            if key in metadata and metadata[key] != value:
                bad(key, f"both a column ({metadata[key]!r}) and in metadata ({value!r})")
            metadata.setdefault(key, value)
    elif inner is not None:
        bad("metadata", f"{_kind(inner)}, not an object")
    if not _unicode(json.dumps(metadata, ensure_ascii=False)):
        bad("metadata", "not valid Unicode (a lone surrogate)")
    parts = []
    for name in slice_by:
        value = metadata.get(name)
        if name in skip:
            continue
        if isinstance(value, dict | list):
            bad(name, f"{_kind(value)}; a slice_by value must be text or a number")
        elif value is None or (isinstance(value, str) and not value.strip()):
            state = "missing" if name not in metadata else "null" if value is None else "empty"
            bad(name, f"{state}: every item needs a value of each slice_by column")
        else:
            part = value.strip() if isinstance(value, str) else json.dumps(value)
            if JOIN in part:
                bad(name, f"{part!r} holds {JOIN!r}, which joins slice_by values")
            parts.append(part)
    good = len(problems) == found and not skip & {"input", *slice_by}
    if "input" in skip or type(text) is not str or not text.strip() or not _unicode(text):
        return None, False
    return EvalItem(text, target, JOIN.join(parts) or "all", metadata, f"{url}:{line}", False, ident,
                    hashlib.sha256(canonical_input(text).encode()).hexdigest()), good


def _text(value, name: str, bad) -> str | None:
    """A string as it is; a number as its text (CSV has them as text already); anything else is a problem."""
    if value is None or type(value) is str:
        if value is not None and not _unicode(value):
            bad(name, "not valid Unicode (a lone surrogate)")
        return value
    if type(value) is int or (type(value) is float and math.isfinite(value)):
        return str(value)
    bad(name, f"{_kind(value)}, not text")
    return None


def _kind(value) -> str:
    return {bool: "true/false", int: "a number", float: "a number", str: "text", list: "a list",
            dict: "an object", bytes: "bytes"}.get(type(value), type(value).__name__)


def _unicode(text: str) -> bool:
    """A JSON escape such as "\\ud800" decodes to text that cannot be stored or hashed as UTF-8."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _plain(value):
    """A metadata value as plain JSON (Parquet has dates, decimals, NaN): what the sealed suite can store."""
    if value is None or type(value) in (str, int, bool):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value)  # Decimal, bytes and the like: their text


def _format(url: str) -> tuple[str | None, bool]:
    path = url.split("?", 1)[0].lower()
    gz = path.endswith(".gz")
    return FORMATS.get(PurePosixPath(path.removesuffix(".gz")).suffix), gz


def _read(url: str, options: Mapping, problems: list[Problem]) -> bytes | None:
    import fsspec

    try:
        with fsspec.open(url, "rb", **options) as f:
            return f.read()
    except FileNotFoundError:
        problems.append(Problem(url, None, None, "file not found"))
    except IsADirectoryError:
        problems.append(Problem(url, None, None, "a folder, not a file"))
    except Exception as exc:  # permissions, credentials, an unreachable store: said once, for this file
        problems.append(Problem(url, None, None, f"cannot read: {type(exc).__name__}: {str(exc)[:200]}"))
    return None


def _jsonl(url: str, data: bytes, problems: list[Problem]):
    """(line, object) per non-blank line; lines are the file's own (blank ones counted), as an editor shows them."""
    body = data.strip()
    if b"\n" in body and body[:1] in (b"[", b"{"):  # perhaps one JSON document over several lines
        try:
            whole = json.loads(body)
        except (ValueError, RecursionError):  # JSON lines fail here at their second line
            whole = None
        if isinstance(whole, list | dict):
            problems.append(Problem(url, None, None, f"one JSON {'array' if isinstance(whole, list) else 'object'} "
                                                     "over several lines; write one JSON object per line"))
            return [], None, set()
    rows = []
    for line, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            record = _DECODER.decode(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            problems.append(Problem(url, line, None, f"not UTF-8 (byte {exc.start + 1} of the line)"))
            continue
        except json.JSONDecodeError as exc:
            problems.append(Problem(url, line, None, f"not JSON: {exc.msg}"))
            continue
        except RecursionError:
            problems.append(Problem(url, line, None, "not JSON: nested too deeply"))
            continue
        if type(record) is not dict:
            problems.append(Problem(url, line, None, f"not a JSON object ({_kind(record)})"))
            continue
        rows.append((line, record))
    return rows, None, set()


def _csv(url: str, data: bytes, problems: list[Problem]):
    """(line a row starts on, {header: cell}); the first non-blank row is the header, every cell is text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        for line, raw in enumerate(data.split(b"\n"), 1):  # no UTF-8 sequence holds a newline byte
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.append(Problem(url, line, None, f"not UTF-8 (byte {exc.start + 1} of the line)"))
        text = data.decode("utf-8", "replace")
    reader = csv.reader(io.StringIO(text, newline=""))
    header, rows, start = None, [], 1
    try:
        for cells in reader:
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in cells):
                continue
            if header is None:
                header = [cell.strip() for cell in cells]
                for name in {n for n in header if header.count(n) > 1}:
                    problems.append(Problem(url, line, name, "the header names this column twice"))
                continue
            if len(cells) != len(header):
                problems.append(Problem(url, line, None, f"{len(cells)} cells where the header has {len(header)} "
                                                         "(a comma in an unquoted cell?)"))
                continue
            rows.append((line, dict(zip(header, cells, strict=True))))
    except csv.Error as exc:
        problems.append(Problem(url, reader.line_num, None, f"not CSV: {exc}"))
    return rows, set(header or ()), set()


def _parquet(url: str, data: bytes, problems: list[Problem]):
    """(row, record) per row; a column of the wrong type is one problem for the file, not one a row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as exc:  # pyarrow's errors for garbage are many; each is the same to a person
        problems.append(Problem(url, None, None, f"not Parquet: {str(exc)[:200]}"))
        return [], set(), set()
    skip = set()
    text = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view, pa.types.is_null)
    numeric = (pa.types.is_integer, pa.types.is_floating)
    for name, allowed in (("input", text), ("target", text + numeric), ("id", text + numeric)):
        if name in table.column_names and not any(is_(table.schema.field(name).type) for is_ in allowed):
            problems.append(Problem(url, None, name, f"the column holds {table.schema.field(name).type}, not text"))
            skip.add(name)
    records = table.drop_columns(sorted(skip - {"input"})).to_pylist()
    return list(enumerate(records, 1)), set(table.column_names), skip


READERS = {"jsonl": _jsonl, "csv": _csv, "parquet": _parquet}
