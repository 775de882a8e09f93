"""JSON lines read in bulk (DuckDB for the plain lines) give exactly what the row-by-row reference gives: the same
staging rows, quarantined rows, reasons, raw text, duplicates, failed expectations and events, on a file where
hostile lines of every kind sit among plain ones, so that the fast path cannot drift from the reference."""

import gzip
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_schema_fuzz import FAST, records

from rmi_pipeline.schema import parse_batch, read_rows
from rmi_pipeline.schema.fields import FIELDS
from rmi_pipeline.schema.jsonl import plain_rows, split_lines
from rmi_pipeline.schema.parse import BOM

MAX_TEXT = 200
pytestmark = pytest.mark.usefixtures("one_duckdb_thread")


def record(i: int, **changes) -> dict:
    out = {"schema_version": 1, "event_id": f"ev-{i}", "ts": "2026-11-30T10:00:00Z", "user_id": f"u{i % 7}",
           "model_version": "1", "prompt": f"{i}+1=", "completion": str(i + 1), "rating": "up",
           "correction": None, "comment": None, "source": "user", "skill": "add", "meta": {"client": "web"}}
    out.update(changes)
    return {k: v for k, v in out.items() if v is not ...}


VARIANTS = {  # values a plain line may carry instead of record()'s, valid or not for the suite
    "rating": ["down", None, "meh", ...],
    "comment": ["fine", "café ☕ \U0001f642", 'quote " and \\ back', "tab\tnew\nline", "\u2028 \x7f", "nul\x00x",
                "a/b", "x" * (MAX_TEXT + 1)],
    "ts": ["2026-11-30T10:00:00+05:00", "2026-11-30T10:00:00", "2999-01-01T00:00:00Z", "yesterday", None, ...],
    "meta": [{}, None, ..., {"a": 1, "b": True, "c": None, "d": -12, "e": "x, y"}, {"big": 123456789012345678},
             {"é": "ü ☕"}],
    "schema_version": [2, 0, -3, None, ...],
    "source": ["report", "bot", None, ...],
    "event_id": ["ev-repeated", " ", ""],
}


def plain(i: int, rng: random.Random) -> bytes:
    """A line the bulk route should take: schema fields, strings or null, in any order and spacing."""
    r = record(i, **{k: rng.choice(v) for k, v in VARIANTS.items() if rng.random() < 0.08})
    keys = list(r)
    if rng.random() < 0.3:
        rng.shuffle(keys)
    text = json.dumps({k: r[k] for k in keys}, ensure_ascii=rng.random() < 0.5,
                      separators=rng.choice([(",", ":"), (", ", ": ")]))
    return (text + rng.choice(["", "", "\r", " "])).encode()


HOSTILE = [  # every kind the reference path must judge: (line, or a function of the event number)
    lambda i: json.dumps(record(i))[: 40].encode(),  # truncated
    lambda i: json.dumps(record(i)).encode()[:-1] + b",}",  # trailing comma
    lambda i: json.dumps(record(i)).encode().replace(b'"web"}', b'"web",}'),  # trailing comma in meta
    lambda i: json.dumps(record(i)).encode().replace(b'"web"}', b'"web" , }'),
    lambda i: json.dumps(record(i, meta={"x": float("nan")})).encode(),
    lambda i: json.dumps(record(i, meta={"x": float("inf")})).encode(),
    lambda i: json.dumps(record(i, rating=float("-inf"))).encode(),
    lambda i: json.dumps(record(i)).encode().replace(b'"schema_version": 1', b'"schema_version": NaN'),
    lambda i: json.dumps(record(i)).encode().replace(b'"schema_version": 1', b'"schema_version": 1e400'),
    lambda i: json.dumps(record(i, meta={"x": 1.5, "y": 1e5})).encode(),
    lambda i: json.dumps(record(i, meta={"n": {"deep": [1, {"x": None}]}})).encode(),
    lambda i: json.dumps(record(i, meta={"q": 'a"b', "k\\": 1})).encode(),
    lambda i: json.dumps(record(i, meta=[1, 2])).encode(),
    lambda i: json.dumps(record(i, meta="text")).encode(),
    lambda i: json.dumps(record(i, meta=7)).encode(),
    lambda i: json.dumps(record(i, extra="kept", another={"x": 1})).encode(),  # unknown fields into meta
    lambda i: json.dumps(record(i, meta=None, extra="alone")).encode(),
    lambda i: json.dumps(record(i, meta={"extra": "m"}, extra="top")).encode(),
    lambda i: json.dumps(record(i)).encode()[:-1] + b', "event_id": "ev-dup"}',  # repeated key: last one wins
    lambda i: json.dumps(record(i)).encode()[:-1] + b', "rating": "down"}',
    lambda i: json.dumps(record(i)).encode().replace(b'"web"}', b'"web", "client": "ios"}'),  # in meta
    lambda i: json.dumps(record(i, completion=42)).encode(),
    lambda i: json.dumps(record(i, rating=["down"])).encode(),
    lambda i: json.dumps(record(i, skill=True)).encode(),
    lambda i: json.dumps(record(i, comment={"k": 1})).encode(),
    lambda i: json.dumps(record(i, ts=1764496800)).encode(),
    lambda i: json.dumps(record(i, schema_version="1")).encode(),
    lambda i: json.dumps(record(i, schema_version=True)).encode(),
    lambda i: json.dumps(record(i, schema_version=1.0)).encode(),
    lambda i: json.dumps(record(i, schema_version=2**63)).encode(),
    lambda i: json.dumps(record(i, schema_version=10**30)).encode(),
    lambda i: json.dumps(record(i)).encode().replace(b'"schema_version": 1', b'"schema_version": -0'),
    lambda i: json.dumps(record(i, source=None)).encode(),
    lambda i: json.dumps(record(i, prompt="\ud800")).encode(),  # lone surrogates, escaped
    lambda i: json.dumps(record(i, comment="x\udfffy")).encode(),
    lambda i: json.dumps(record(i, meta={"\ud800": 1})).encode(),
    lambda i: json.dumps(record(i, extra="\udbff")).encode(),
    lambda i: json.dumps(record(i, comment="pair \U0001f642")).encode(),  # a valid pair, escaped
    lambda i: json.dumps(record(i, prompt="\ud800"), ensure_ascii=False).encode("utf-8", "surrogatepass"),
    lambda i: json.dumps(record(i, comment="caf\xe9")).encode().replace(b"\\u00e9", b"\xe9"),  # latin-1
    lambda i: b"\xff\xfe" + json.dumps(record(i)).encode(),
    lambda i: json.dumps(record(i)).encode().replace(b'"add"', b'"a\x01d"'),  # raw control character
    lambda i: json.dumps(record(i)).encode().replace(b'"event_id"', b'"\\u0065vent_id"'),  # escaped key
    lambda i: json.dumps(record(i)).encode().replace(b'"ts":', b'"ts" :'),  # space before a colon
    lambda i: json.dumps(record(i)).encode().replace(b'"prompt"', b'"prompt\\/"'),
    lambda i: json.dumps(record(i)).encode() + b" extra",
    lambda i: json.dumps(record(i)).encode() + json.dumps(record(i + 1)).encode(),
    lambda i: b"  \t" + json.dumps(record(i)).encode(),  # leading spaces
    lambda i: BOM + json.dumps(record(i)).encode(),  # a BOM not at the start of the file
    lambda i: b"\x0b" + json.dumps(record(i)).encode(),
    lambda i: json.dumps(record(i)).encode() + b"\x0c",
    lambda i: json.dumps(record(i)).encode().replace(b": ", b":\n "),
    lambda i: json.dumps(record(i, prompt="7" * (MAX_TEXT + 5))).encode(),
    lambda i: json.dumps(record(i, meta={"blob": "x" * MAX_TEXT})).encode(),
    lambda i: json.dumps(record(i), indent=None).encode().replace(b"{", b"{/*c*/", 1),
    lambda i: json.dumps({"schema_version": 1, **{k: None for k in FIELDS if k != "schema_version"}}).encode(),
    b"{}", b"[1, 2]", b"[]", b'"a string"', b"42", b"null", b"true", b"not json at all", b"{", b"}", b"[" * 5000,
    b"[" * 100_000 + b"]" * 100_000, b'{"a": 1}', b'{"meta": {}}', b'{"meta": null}', b'{"source": null}',
    b'{"meta": {"source": "x"}}', b'{"meta": {"schema_version": 3}}', b"\r", b"\x0b", b"\x0c \t",
]


def hostile_file(n: int, seed: int) -> tuple[bytes, set[int]]:
    """n lines, about a third hostile, blank lines between some; and the rows that are plain by construction."""
    rng = random.Random(seed)
    lines, plain_lines, row = [], set(), 0
    for i in range(n):
        if rng.random() < 0.05:
            lines.append(rng.choice([b"", b" ", b"\t\r", b"\r"]))  # blank: not a row
            continue
        if rng.random() < 0.35:
            make = rng.choice(HOSTILE)
            lines.append(make(i) if callable(make) else make)
            added = sum(1 for part in lines[-1].split(b"\n") if part.strip())  # some hold a newline
            if not added:  # blank to bytes.strip() but not to JSON (\x0b): the row before goes row by row
                plain_lines.discard(row)
            row += added
        else:
            lines.append(plain(i, rng))
            row += 1
            plain_lines.add(row)
    return b"\n".join(lines), plain_lines


def assert_same(name: str, data: bytes) -> None:
    bulk, reference = read_rows(name, data), read_rows(name, data, by_row=True)
    assert bulk.table.schema == reference.table.schema
    assert bulk.table.to_pylist() == reference.table.to_pylist()
    assert bulk.unparsed == reference.unparsed
    rows = bulk.table.num_rows + len(bulk.unparsed)
    assert [bulk.raw(r) for r in range(1, rows + 1)] == [reference.raw(r) for r in range(1, rows + 1)]
    fast, slow = parse_batch(name, data, "b", MAX_TEXT), parse_batch(name, data, "b", MAX_TEXT, by_row=True)
    assert fast.frame.equals(slow.frame) and fast.frame.schema == slow.frame.schema
    assert fast.quarantined == slow.quarantined
    assert (fast.duplicates, fast.failed_expectations, fast.unparsed) == (
        slow.duplicates, slow.failed_expectations, slow.unparsed)


def test_bulk_and_row_by_row_agree_on_a_file_full_of_hostile_lines():
    data, plain_lines = hostile_file(15_000, seed=24)
    assert_same("b.jsonl", data)
    parsed = parse_batch("b.jsonl", data, "b", MAX_TEXT)
    assert len(parsed.events) > 4000 and len(parsed.quarantined) > 4000 and parsed.duplicates > 50
    assert len({q["reason"] for q in parsed.quarantined}) > 30  # every kind of reason, not one
    # and the bulk route is the one that took the plain lines (only a repeated meta key sends one back)
    table, rest = plain_rows(split_lines(data))
    assert plain_lines <= set(table.column("row").to_pylist())
    assert table.num_rows + len(rest) == len(split_lines(data))


def test_bulk_and_row_by_row_agree_with_a_bom_gzip_and_no_final_newline():
    data, _ = hostile_file(2_000, seed=7)
    for variant in (BOM + data, data + b"\n", data + b"\n\n \n", b"\n\n" + data, data.replace(b"\n", b"\r\n")):
        assert_same("b.jsonl", variant)
        assert_same("b.jsonl.gz", gzip.compress(variant))


def test_every_hostile_kind_alone_agrees():
    between = []  # each kind between two plain records of its own, all in one file: one comparison (~0.15 s each)
    for i, make in enumerate(HOSTILE):
        line = make(i) if callable(make) else make
        assert_same("b.jsonl", line)
        between += [json.dumps(record(10_000 + 2 * i)).encode(), line, json.dumps(record(10_001 + 2 * i)).encode()]
    assert_same("b.jsonl", b"\n".join(between))


# each example runs four routes and the suite twice (~0.15 s); 50 derandomized lists of up to 12 arbitrary records
# beside the hostile files above, which hold every kind that sends a line row by row
@settings(FAST, max_examples=50)
@given(st.lists(records, max_size=12), st.booleans(), st.booleans())
def test_arbitrary_json_objects_agree(rows, ascii_only, compact):
    separators = (",", ":") if compact else (", ", ": ")
    assert_same("b.jsonl", b"\n".join(json.dumps(r, ensure_ascii=ascii_only, separators=separators)
                                      .encode("utf-8", "surrogatepass") for r in rows))
