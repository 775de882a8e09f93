"""Feedback schema v1: every input row comes out as an event, a duplicate, or quarantined with a reason."""

import gzip
import io
import json

import polars as pl

from rmi_pipeline.schema import parse_batch

GOOD = {"schema_version": 1, "event_id": "e1", "ts": "2026-11-30T10:00:00Z", "user_id": "u1",
        "model_version": "3", "prompt": "12+30=", "completion": "42", "rating": "up", "correction": None,
        "comment": None, "source": "user", "skill": "add", "meta": {"client": "web"}}


def line(**changes) -> bytes:
    record = {**GOOD, **changes}
    return json.dumps({k: v for k, v in record.items() if v is not ...}).encode()


def test_bad_rows_are_quarantined_with_a_reason_and_counts_add_up():
    rows = [
        line(event_id="ok-1"),
        b'{"event_id": "broken',  # truncated JSON
        b"[1, 2, 3]",  # not an object
        b"\xff\xfe not utf-8",
        line(event_id="no-ts", ts=...),
        line(event_id="bad-rating", rating="meh"),
        line(event_id="future", schema_version=2),
        line(event_id="huge", prompt="1" * 5000),
        line(event_id="naive-ts", ts="2026-11-30T10:00:00"),
        line(event_id="in-future", ts="2999-01-01T00:00:00Z"),
        line(event_id="", prompt="1+1="),
        line(event_id="wrong-type", completion=42),
        line(event_id="ok-1"),  # duplicate inside the batch
        line(event_id="ok-2", rating=None, correction="43", extra_field="kept"),
    ]
    parsed = parse_batch("b.jsonl", b"\n".join(rows) + b"\n\n", "b.jsonl", max_text_chars=4096)
    assert parsed.rows_in == len(rows)
    assert [e["event_id"] for e in parsed.events] == ["ok-1", "ok-2"]
    assert parsed.duplicates == 1
    reasons = [q["reason"] for q in parsed.quarantined]
    assert len(reasons) == 11
    for expected in ["malformed JSON", "not a JSON object", "invalid UTF-8", "ts must be", "rating must be",
                     "newer than this pipeline", "prompt too long", "no time zone", "in the future",
                     "event_id must be a non-empty string", "completion must be a string"]:
        assert any(expected in r for r in reasons), expected
    assert json.loads(parsed.events[1]["meta"]) == {"client": "web", "extra_field": "kept"}
    assert all(e["batch_id"] == "b.jsonl" for e in parsed.events)


def test_gzip_and_parquet_batches_parse_like_jsonl():
    data = b"\n".join([line(event_id="a"), line(event_id="b")])
    assert len(parse_batch("b.jsonl.gz", gzip.compress(data), "b", 4096).events) == 2
    buf = io.BytesIO()
    pl.DataFrame([{**GOOD, "meta": None, "event_id": "p1"}]).write_parquet(buf)
    assert [e["event_id"] for e in parse_batch("b.parquet", buf.getvalue(), "b", 4096).events] == ["p1"]


def test_unreadable_files_are_one_quarantined_row_not_a_crash():
    for name in ("b.parquet", "b.jsonl.gz"):
        parsed = parse_batch(name, b"not really", "b", 4096)
        assert parsed.events == [] and len(parsed.quarantined) == 1
    assert parse_batch("b.jsonl", b"", "b", 4096).rows_in == 0


def test_a_parquet_batch_with_float_meta_parses_as_its_jsonl_and_a_nan_in_it_is_quarantined():
    """The gateway logs a sampled answer's temperature as a float in meta: such a batch takes the fast path and
    lands as the same events as its JSONL; a NaN there (which JSON cannot carry) is quarantined as in JSONL."""
    metas = [{"client": "web", "temperature": 0.7, "sample_seed": 5}, {"client": "ios", "temperature": None,
                                                                        "sample_seed": None}]
    rows = [{**GOOD, "event_id": f"f{i}", "meta": m} for i, m in enumerate(metas)]
    buf = io.BytesIO()
    pl.DataFrame(rows).write_parquet(buf)
    fast = parse_batch("b.parquet", buf.getvalue(), "b", 4096)
    reference = parse_batch("b.jsonl", b"\n".join(json.dumps(r).encode() for r in rows), "b", 4096)
    assert [json.loads(e["meta"]) for e in fast.events] == [json.loads(e["meta"]) for e in reference.events]
    assert json.loads(fast.events[0]["meta"])["temperature"] == 0.7
    buf = io.BytesIO()
    pl.DataFrame([{**rows[0], "meta": {"temperature": float("nan")}}, rows[1]]).write_parquet(buf)
    parsed = parse_batch("b.parquet", buf.getvalue(), "b", 4096)
    assert [e["event_id"] for e in parsed.events] == ["f1"] and "NaN" in parsed.quarantined[0]["reason"]
