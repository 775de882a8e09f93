"""What the importers share: an export file read into records, the mapping rules a team sets, the text of a prompt
or an answer inside a tool's JSON, and the conversion that keeps the counts adding up (read = events + skipped).

An export is untrusted input: it is parsed as JSON, CSV or Parquet and never executed or unpickled; a file larger
than MAX_FILE_BYTES (compressed or not) is refused, as is one that does not have the shape its tool writes, with the
file, the line or record and the field named. A record of the right shape that cannot become an event is skipped
with its reason and its id in the tool, never dropped silently.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..fields import FIELDS, SCHEMA_VERSION

MAX_FILE_BYTES = 512 * 2**20  # an export larger than this is split by whoever exported it
MAX_DEPTH = 64  # JSON nested deeper than this is not an export; Python's parser would hit its stack first
SUFFIXES = (".json", ".jsonl", ".ndjson", ".csv", ".parquet")
# labels read as a thumbs up or down when a team names none (compared lower case, '-' and ' ' as '_')
UP_LABELS = frozenset({"up", "thumbs_up", "thumbsup", "👍", "good", "positive", "correct", "pass", "passed", "yes",
                       "true", "helpful", "relevant", "accurate", "factual", "resolved"})
DOWN_LABELS = frozenset({"down", "thumbs_down", "thumbsdown", "👎", "bad", "negative", "incorrect", "wrong", "fail",
                         "failed", "no", "false", "unhelpful", "not_helpful", "irrelevant", "not_relevant",
                         "inaccurate", "hallucinated", "unresolved"})
PROMPT_ROLES = frozenset({"user", "human"})
ANSWER_ROLES = frozenset({"assistant", "ai", "model", "bot"})
# keys a tool's JSON input or output often holds its text under, most specific first
PROMPT_KEYS = ("prompt", "question", "query", "input", "user_input", "text", "content", "message")
ANSWER_KEYS = ("completion", "answer", "output", "response", "result", "text", "content", "message")


class ExportError(ValueError):
    """A file an importer refuses: what is wrong and where (file, line or record, field). Nothing is written."""


@dataclass(frozen=True)
class Record:
    """One object of an export, and where it is, for the errors and reasons that name it."""

    file: str
    place: str  # "line 3", "record 3", "line 2, record 7" (an API page per line) or "row 3" (CSV, Parquet)
    data: dict
    from_text_table: bool = False  # a CSV row: every value is text, and nested values are JSON text

    def where(self, name: str | None = None) -> str:
        return f"{self.file} {self.place}" + (f", field {name}" if name else "")

    def fail(self, name: str | None, problem: str) -> ExportError:
        return ExportError(f"{self.where(name)}: {problem}")

    def get(self, name: str):
        """A field's value; in a CSV row an empty cell is null, and an object or array is decoded from its JSON."""
        value = self.data.get(name)
        if not self.from_text_table or not isinstance(value, str):
            return value
        if value == "":
            return None
        if value[:1] in "{[":
            try:
                return _DECODER.decode(value)
            except (json.JSONDecodeError, RecursionError):
                return value
        return value

    def string(self, *names: str, required: bool = False) -> str | None:
        """The first of these fields that holds a value, as text (an integer id is text too); another type, or none
        where one is required, refuses the file."""
        for name in names:
            value = self.data.get(name)
            if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
                continue
            if isinstance(value, str):
                return value
            if isinstance(value, int) and not isinstance(value, bool):
                return str(value)
            raise self.fail(name, f"must be text, not {type(value).__name__}")
        if required:
            raise self.fail(" or ".join(names), "missing")
        return None


def read_records(path: Path, unwrap: str | None = "data") -> list[Record]:
    """Every object in one export file: a JSON array, a JSON object (an API page's `unwrap` list, or the object
    itself), JSON lines (each a record, or an API page), CSV with a header row, or Parquet; `.gz` of any."""
    name = path.name
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ExportError(f"{name}: {size:,} bytes, more than the {MAX_FILE_BYTES:,} an import reads; export less "
                          "at a time")
    data = path.read_bytes()
    inner = name.lower()
    if inner.endswith(".gz"):
        data, inner = _gunzip(name, data), inner.removesuffix(".gz")
    if not inner.endswith(SUFFIXES):
        raise ExportError(f"{name}: not an export this reads: it must end in {', '.join(SUFFIXES)} (or .gz of one)")
    if inner.endswith(".parquet"):
        return _parquet_records(name, data)
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ExportError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    if inner.endswith(".csv"):
        return _csv_records(name, text)
    if inner.endswith(".json"):
        return _document_records(name, _decode(name, "", text), unwrap)
    records = []
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            value = _decode(name, f"line {number}", line)
            records += _document_records(name, value, unwrap, f"line {number}")
    return records


def _gunzip(name: str, data: bytes) -> bytes:
    """At most MAX_FILE_BYTES out: a small gzip can hold gigabytes of zeros."""
    out, stream = bytearray(), zlib.decompressobj(wbits=31)
    try:
        while True:
            out += stream.decompress(data, MAX_FILE_BYTES + 1 - len(out))
            if len(out) > MAX_FILE_BYTES:
                raise ExportError(f"{name}: more than {MAX_FILE_BYTES:,} bytes once decompressed; export less at "
                                  "a time")
            data = stream.unconsumed_tail
            if stream.eof or not data:
                break
    except zlib.error as exc:
        raise ExportError(f"{name}: unreadable gzip ({exc})") from None
    if not stream.eof:
        raise ExportError(f"{name}: unreadable gzip (the file ends too soon)")
    return bytes(out)


def _decode(name: str, place: str, text: str):
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        where = place or f"line {exc.lineno}"
        raise ExportError(f"{name} {where}: malformed JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:
        raise ExportError(f"{name} {place or 'document'}: JSON nested too deeply") from None


def _document_records(name: str, value, unwrap: str | None, place: str = "") -> list[Record]:
    if isinstance(value, dict) and unwrap and isinstance(value.get(unwrap), list):
        value = value[unwrap]  # a page of a tool's public API: {"data": [...], "meta": {...}}
    items = value if isinstance(value, list) else [value]
    records = []
    for index, item in enumerate(items, 1):
        where = ", ".join(p for p in (place, f"record {index}" if isinstance(value, list) else "") if p) or "record 1"
        if not isinstance(item, dict):
            raise ExportError(f"{name} {where}: not a JSON object")
        records.append(Record(name, where, item))
    return records


def _csv_records(name: str, text: str) -> list[Record]:
    csv.field_size_limit(MAX_FILE_BYTES)  # one cell may hold a whole conversation; the file is bounded already
    reader = csv.DictReader(io.StringIO(text, newline=""))
    records = []
    try:
        for number, row in enumerate(reader, 1):
            if None in row:
                raise ExportError(f"{name} row {number} (line {reader.line_num}): more cells than the header has")
            records.append(Record(name, f"row {number}", dict(row), from_text_table=True))
    except csv.Error as exc:
        raise ExportError(f"{name} line {reader.line_num}: malformed CSV ({exc})") from None
    return records


def _parquet_records(name: str, data: bytes) -> list[Record]:
    import polars as pl

    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: B036 - polars raises a Rust panic (a BaseException) on some garbage
        raise ExportError(f"{name}: unreadable Parquet ({str(exc)[:200]})") from None
    return [Record(name, f"row {number}", row) for number, row in enumerate(frame.iter_rows(named=True), 1)]


def _not_json(constant: str):
    raise json.JSONDecodeError(f"{constant} is not JSON", constant, 0)


_DECODER = json.JSONDecoder(parse_constant=_not_json)


# ------------------------------------------------------------------------------------------------- mapping rules


def label_key(label: str) -> str:
    return "_".join(label.strip().lower().replace("-", " ").split())


def labels(text: str | None, default: frozenset[str]) -> frozenset[str]:
    """A comma list of labels as the rules compare them; None: the default set."""
    if text is None:
        return default
    return frozenset(label_key(t) for t in text.split(",") if t.strip())


@dataclass(frozen=True)
class Mapping:
    """How a tool's scores become thumbs, and what an event takes when the tool does not say."""

    names: frozenset[str] | None = None  # only scores of these names; None: every score with a usable value
    threshold: float | None = None  # a number at or above it is a thumbs-up, below a thumbs-down
    up_labels: frozenset[str] = UP_LABELS
    down_labels: frozenset[str] = DOWN_LABELS
    source: str | None = None  # "user" or "report" for every event; None: by who scored (see each importer)
    model_version: str | None = None  # every event's model_version; None: the one the tool recorded
    anonymous_user: str = "anonymous"  # user_id where the tool recorded no user

    def counts(self, name: str) -> bool:
        return self.names is None or name in self.names

    def from_label(self, label: str) -> str | None:
        key = label_key(label)
        if key in self.up_labels and key not in self.down_labels:
            return "up"
        if key in self.down_labels and key not in self.up_labels:
            return "down"
        return None

    def from_value(self, value: float) -> tuple[str | None, str]:
        """A number's thumb, or why it has none: with a threshold, at or above it is up; without one only 1 (up),
        0 and -1 (down) mean a thumb."""
        if self.threshold is not None:
            return ("up" if value >= self.threshold else "down"), ""
        if value == 1:
            return "up", ""
        if value in (0, -1):
            return "down", ""
        return None, "a number other than 1, 0 or -1 and no --threshold"

    def rating(self, label: str | None, value: float | None) -> tuple[str | None, str, str]:
        """(rating, reason it has none, detail) from a label and/or a number: the label first, where it is an up or
        a down label, else the number."""
        if label is not None and (thumb := self.from_label(label)):
            return thumb, "", ""
        if value is not None:
            thumb, reason = self.from_value(value)
            return thumb, reason, "" if thumb else f"value {value:g}"
        if label is not None:
            return None, "a label in neither --up-labels nor --down-labels", f"label {label!r}"
        return None, "no label and no value", ""


def number(value) -> float | None:
    """A score's number (text in a CSV), or None where it has none; booleans are 1 and 0."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            parsed = float(value)
        except ValueError:
            return None
        return parsed if math.isfinite(parsed) else None
    return None


def timestamp(record: Record, *names: str) -> str:
    """The first of these fields as RFC 3339 in UTC: ISO 8601 text with a zone, epoch seconds, milliseconds,
    microseconds or nanoseconds (a number, or digits), or a zoned datetime (Parquet). Missing or zoneless refuses."""
    for name in names:
        value = record.data.get(name)
        if value is None or value == "":
            continue
        stamp = _stamp(value)
        if stamp is None:
            raise record.fail(name, f"not a timestamp with a time zone: {str(value)[:60]!r}")
        return stamp.astimezone(UTC).isoformat()
    raise record.fail(" or ".join(names), "missing")


def _stamp(value) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return from_epoch(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        return parsed if parsed.tzinfo else None
    return None


def from_epoch(value: float) -> datetime | None:
    """An epoch number in the unit its size says: nanoseconds (OTLP), microseconds, milliseconds (pandas' JSON)."""
    whole = int(value)
    scale = 10**9 if abs(whole) >= 10**17 else 10**6 if abs(whole) >= 10**14 else 10**3 if abs(whole) >= 10**11 else 1
    try:
        seconds, rest = divmod(whole, scale)
        return datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest * 10**6 // scale)
    except (OverflowError, OSError, ValueError):
        return None


# ------------------------------------------------------------------------------------------ prompts and answers


def text_of(value, want: str, depth: int = 0) -> str | None:
    """The text of a prompt (`want` "prompt": the last user message) or an answer ("answer": the last assistant
    message) inside a tool's JSON: plain text, chat messages (`content` as text or parts), {"messages": [...]},
    an OpenAI-style response ({"choices": [...]}), or an object with one text field under a usual key."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, list):
        messages = [m for m in value if isinstance(m, dict) and "role" in m]
        if messages:
            roles = PROMPT_ROLES if want == "prompt" else ANSWER_ROLES
            chosen = [m for m in messages if str(m.get("role")).lower() in roles]
            return message_text(chosen[-1]) if chosen else None
        if value and all(isinstance(p, dict) and "type" in p for p in value):
            return parts_text(value)
        if len(value) == 1:
            return text_of(value[0], want, depth + 1)
        return None
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("messages"), list):
        return text_of(value["messages"], want, depth + 1)
    if isinstance(value.get("choices"), list) and value["choices"] and isinstance(value["choices"][0], dict):
        choice = value["choices"][0]
        return text_of(choice.get("message", choice.get("text")), want, depth + 1)
    if "role" in value:
        return message_text(value)
    for key in PROMPT_KEYS if want == "prompt" else ANSWER_KEYS:
        if key in value and (found := text_of(value[key], want, depth + 1)):
            return found
    if len(value) == 1:
        return text_of(next(iter(value.values())), want, depth + 1)
    return None


def message_text(message: dict) -> str | None:
    content = message.get("content", message.get("parts"))
    if isinstance(content, str):
        return content if content.strip() else None
    if isinstance(content, list):
        return parts_text(content)
    return None


def parts_text(parts: list) -> str | None:
    """The text parts of a message, joined: {"type": "text", "text": ...} (OpenAI, Anthropic) or {"type": "text",
    "content": ...} (OpenTelemetry GenAI); images, tool calls and the like are left out."""
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text", None):
            text = part.get("text", part.get("content"))
            if isinstance(text, str):
                texts.append(text)
    joined = "\n".join(texts)
    return joined if joined.strip() else None


# ------------------------------------------------------------------------------------------------ the conversion


@dataclass
class Conversion:
    """One tool's export as feedback events: every score read is an event or skipped with its reason."""

    tool: str
    unit: str = "scores"  # what the tool calls what it judges answers with: scores, annotations, evaluations
    read: int = 0  # how many were read: the "in" of the counts
    events: list[dict] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (id in the tool, reason, detail)
    context: dict[str, int] = field(default_factory=dict)  # what was read for prompts and answers, by kind

    def skip(self, source_id: str, reason: str, detail: str = "") -> None:
        self.skipped.append((source_id, reason, detail))

    def reasons(self) -> list[tuple[str, int, list[str]]]:
        """(reason, how many, the first ids with their detail), the commonest first."""
        counts = Counter(reason for _, reason, _ in self.skipped)
        ids: dict[str, list[str]] = {}
        for source_id, reason, detail in self.skipped:
            ids.setdefault(reason, []).append(f"{source_id} ({detail})" if detail else source_id)
        return [(reason, n, ids[reason]) for reason, n in counts.most_common()]

    def summary(self, shown: int = 5) -> list[str]:
        assert self.read == len(self.events) + len(self.skipped), "every score is an event or skipped"
        read = ", ".join(f"{n} {kind}" for kind, n in self.context.items())
        lines = [f"{self.tool}: {self.read} {self.unit} read ({read} for their prompts and answers): "
                 f"{len(self.events)} events, {len(self.skipped)} skipped"]
        for reason, n, ids in self.reasons():
            more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
            lines.append(f"  {n:>6}  {reason}: {', '.join(ids[:shown])}{more}")
        return lines

    def jsonl(self) -> bytes:
        return b"".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
                        for e in self.events)

    def batch_name(self) -> str:
        """Named after the tool and what it holds: the same export converted again has the same name."""
        return f"{self.tool}-{hashlib.sha256(self.jsonl()).hexdigest()[:12]}.jsonl"


def event(**values) -> dict:
    """A schema-v1 event, its fields in the schema's order."""
    unknown = values.keys() - set(FIELDS)
    assert not unknown, unknown
    return {name: SCHEMA_VERSION if name == "schema_version" else values.get(name) for name in FIELDS}


def stable_id(tool: str, *parts: object) -> str:
    """An event id from what identifies a score where the tool gives it no id of its own."""
    return f"{tool}:" + hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]
