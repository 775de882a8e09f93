"""Property-based fuzz of the feedback parser: whatever a client sends, parse_batch neither crashes nor loses a row.

Every non-blank line comes out exactly once (event, duplicate or quarantined with a reason), and every event it
lets through can be stored (the warehouse frame builds and converts to Arrow).
"""

import gzip
import json
from datetime import UTC

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmi_pipeline.schema import event_frame, parse_batch
from rmi_pipeline.schema.parse import BOM

# hypothesis's own default of 100 examples (each parses up to four times, ~0.07 s a parse), derandomized: the same
# on every machine; `plausible` below is mostly right so that they reach every check, not only the first
FAST = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
MAX_TEXT = 64
pytestmark = pytest.mark.usefixtures("one_duckdb_thread")

any_text = st.text(st.characters(exclude_categories=()), max_size=8)  # lone surrogates included
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)
# a record a real client would send: mostly right, so that fuzzing reaches every check, not only the first
plausible = st.fixed_dictionaries({
    "schema_version": st.sampled_from([1, 1, 1, 2, 0]), "event_id": st.sampled_from(["a", "b", "c", " "]),
    "ts": st.sampled_from(["2026-11-30T10:00:00Z", "2026-11-30T10:00:00+05:00", "2026-11-30T10:00:00",
                           "2999-01-01T00:00:00+00:00", "0001-01-01T00:00:00+01:00", "x"]),
    "user_id": any_text, "model_version": st.sampled_from(["1", "2"]), "prompt": st.text(max_size=80),
    "completion": any_text, "rating": st.sampled_from(["up", "down", None, "meh"]),
    "correction": st.none() | any_text, "comment": st.none() | st.text(max_size=80),
    "source": st.sampled_from(["user", "report", "bot"]), "skill": st.none() | any_text,
    "meta": st.none() | st.dictionaries(any_text, json_values, max_size=3),
})


def mutate(record: dict, dropped: set, wild: dict, extra: dict) -> dict:
    """Some fields dropped, some replaced by any JSON value, some unknown ones added."""
    return {**extra, **{k: v for k, v in record.items() if k not in dropped}, **wild}


KEYS = ["schema_version", "event_id", "ts", "user_id", "model_version", "prompt", "completion", "rating",
        "correction", "comment", "source", "skill", "meta"]
records = st.builds(mutate, plausible, st.sets(st.sampled_from(KEYS), max_size=2),
                    st.dictionaries(st.sampled_from(KEYS), json_values, max_size=2),
                    st.dictionaries(any_text, json_values, max_size=2))


def non_blank_lines(data: bytes) -> int:
    return sum(1 for line in data.removeprefix(BOM).split(b"\n") if line.strip())


def assert_accounted(parsed, rows: int) -> None:
    assert parsed.rows_in == rows
    assert all(q["reason"] and len(q["raw"]) <= MAX_TEXT for q in parsed.quarantined)
    ids = [e["event_id"] for e in parsed.events]
    assert len(ids) == len(set(ids))
    for e in parsed.events:
        assert e["ts"].tzinfo == UTC and e["rating"] in ("up", "down", None) and e["source"] in ("user", "report")
        assert all(len(e[k]) <= MAX_TEXT for k in ("prompt", "completion", "event_id") if isinstance(e[k], str))
    event_frame(parsed.events).to_arrow()  # what the warehouse would store


@FAST
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_crash_and_every_line_is_accounted_for(data):
    assert_accounted(parse_batch("b.jsonl", data, "b", MAX_TEXT), non_blank_lines(data))
    assert_accounted(parse_batch("b.jsonl.gz", gzip.compress(data), "b", MAX_TEXT), non_blank_lines(data))
    for name in ("b.jsonl.gz", "b.parquet"):  # not what the name promises: at most one quarantined row
        parsed = parse_batch(name, data, "b", MAX_TEXT)
        assert parsed.events == [] and len(parsed.quarantined) == (1 if data else 0)


@FAST
@given(st.lists(records, max_size=12), st.lists(st.sampled_from([b"", b" ", b"\r"]), max_size=3),
       st.booleans())
def test_arbitrary_json_objects_never_crash_and_every_row_is_accounted_for(rows, blanks, ascii_only):
    data = b"\n".join([json.dumps(r, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") for r in rows]
                      + blanks)
    parsed = parse_batch("b.jsonl", data, "b", MAX_TEXT)
    assert_accounted(parsed, len(rows))
