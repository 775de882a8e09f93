"""A corpus of bad inputs through the real sensor and assets: nothing crashes, every row is accounted for.

For every batch: rows_in == ingested + duplicates + quarantined, each quarantined row carries its reason, and
files the sensor must not take (wrong extensions, hidden, names Dagster cannot use) start no run.
"""

import gzip
import io
import json

import polars as pl
import pytest
from dagster import instance_for_test
from feedback_intake import Intake, event

from rmi_pipeline.resources import build_resources
from rmi_pipeline.settings import Feedback


def lines(*rows) -> bytes:
    return b"\n".join(r if isinstance(r, bytes) else r.encode() for r in rows) + b"\n"


def parquet(rows: list[dict], keep: int | None = None) -> bytes:
    buf = io.BytesIO()
    pl.DataFrame(rows).head(len(rows) if keep is None else keep).write_parquet(buf)
    return buf.getvalue()


def row(i: int, **changes) -> dict:
    return {**json.loads(event(i)), "meta": None, **changes}


LATIN1 = event(52).encode().replace(b'"comment": null', b'"comment": "caf\xe9"')
ODD_TEXT = "nul\x00byte, emoji \U0001f642, right-to-left \u202e, line\u2028separator"

# name -> (file bytes, expected counts, expected reasons: a substring per quarantined row)
CORPUS = {
    "malformed.jsonl": (lines(event(1), '{"event_id": "x", ', "not json at all", "[1, 2]", '"a string"',
                              "[" * 100_000 + "]" * 100_000, event(2, meta={"x": float("nan")}), '{"a": 1} extra'),
                        (8, 1, 0, 7), ["malformed JSON"] * 2 + ["not a JSON object"] * 2
                        + ["nested too deeply", "NaN is not JSON", "malformed JSON"]),
    "wrong-types.jsonl": (lines(event(10), event(11), event(12, rating=["down"]), event(13, event_id=13),
                                event(14, ts=1764496800), event(15, meta=[1]), event(16, schema_version="1"),
                                event(17, schema_version=True), event(18, source={"k": 1}), event(19, skill=7),
                                event(20, ts="yesterday"), event(21, ts="0001-01-01T00:00:00+01:00")),
                          (12, 2, 0, 10), ["rating must be", "event_id must be", "ts must be an RFC 3339",
                                           "meta must be an object", "schema_version must be"] + [
                              "schema_version must be", "source must be", "skill must be a string or null",
                              "ts is not RFC 3339", "ts is out of range"]),
    "missing-fields.jsonl": (lines(event(30), event(31, event_id=...), event(32, ts=...), event(33, prompt=...),
                                   event(34, completion=...), event(35, user_id=...), event(36, model_version=...),
                                   event(37, schema_version=..., rating=..., correction=..., comment=...,
                                         source=..., skill=..., meta=...), "{}"),
                             (9, 2, 0, 7), ["event_id must be", "ts must be", "prompt must be", "completion must be",
                                            "user_id must be", "model_version must be", "event_id must be"]),
    "huge.jsonl": (lines(event(40), event(41, prompt="7" * 1_000_000), event(42, event_id="e" * 10_000),
                         event(43, comment="c" * 5000), event(44, meta={"blob": "x" * 10_000}),
                         event(45, unknown_field="y" * 10_000), "z" * 3_000_000),
                   (7, 1, 0, 6), ["prompt too long", "event_id too long", "comment too long", "meta too long",
                                  "meta too long", "malformed JSON"]),
    "encoding.jsonl": (lines(b"\xef\xbb\xbf" + event(50).encode(), b"\xff\xfe\xfa" + event(51).encode(), LATIN1,
                             event(53, prompt="\ud800"), event(54, comment=ODD_TEXT), event(55).encode() + b"\r"),
                       (6, 3, 0, 3), ["invalid UTF-8", "invalid UTF-8", "prompt is not valid Unicode"]),
    "zero-bytes.jsonl": (b"", (0, 0, 0, 0), []),
    "blank-lines.jsonl": (b"\n \n\t\r\n\n", (0, 0, 0, 0), []),
    "zero-bytes.parquet": (b"", (0, 0, 0, 0), []),
    "empty.jsonl.gz": (gzip.compress(b""), (0, 0, 0, 0), []),
    "zero-rows.parquet": (parquet([row(0)], keep=0), (0, 0, 0, 0), []),
    "dups-a.jsonl": (lines(event(60), event(61), event(60), event(60, rating="down")), (4, 2, 2, 0), []),
    "dups-b.jsonl": (lines(event(61), event(62), event(62)), (3, 1, 2, 0), []),  # 61 landed in dups-a
    "future.jsonl": (lines(event(70), event(71, schema_version=2), event(72, schema_version=99)),
                     (3, 1, 0, 2), ["newer than this pipeline"] * 2),
    "mixed.parquet": (parquet([row(80, score=0.5), row(81, rating="sideways", score=1.0),
                               row(82, schema_version=2, score=2.0), row(83, score=float("nan"))]),
                      (4, 1, 0, 3), ["rating must be", "newer than this pipeline", "meta holds NaN"]),
}
# too broken to trust: quarantined whole by the blocking rows_valid check (rows_in, bad rows)
BLOCKED = {
    "all-future.jsonl": (lines(event(73, schema_version=2), event(74, schema_version=2)), 2),
    "corrupt.jsonl.gz": (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"garbage" * 10, 1),
    "truncated.jsonl.gz": (gzip.compress(lines(*(event(i) for i in range(90, 99))))[:-12], 1),
    "corrupt.parquet": (b"PAR1" + b"\x00garbage" * 20 + b"PAR1", 1),
    "types.parquet": (parquet([row(100, event_id=1), row(101, event_id=2)]), 2),
}
IGNORED = ["notes.txt", "batch.json", "batch.JSONL", "batch.csv", "batch.jsonl.tmp", ".hidden.jsonl",
           "batch.jsonl.gz.part", "export...jsonl"]


@pytest.fixture
def intake(rmi_env):
    with instance_for_test() as instance:  # row-level quarantine shows each reason
        yield Intake(build_resources(rmi_env.model_copy(update={"feedback": Feedback(max_bad_share=0.99)})), instance)


def test_every_bad_input_is_accounted_for_and_nothing_crashes(intake):
    for name, (data, *_) in CORPUS.items():
        intake.land(name, data)
    for name, (data, _) in BLOCKED.items():
        intake.land(name, data)
    for name in IGNORED:
        intake.land(name, lines(event(999)))

    tick = intake.tick()
    assert sorted(r.partition_key for r in tick.run_requests) == sorted([*CORPUS, *BLOCKED])

    got, reasons = {}, {}
    for name in CORPUS:
        run, meta = intake.ingest(name)
        assert run.success, name
        m = meta["feedback_events"]
        got[name] = (m["rows_in"], m["ingested"], m["duplicates"], m["quarantined"])
        reasons[name] = [q["reason"] for q in intake.quarantined(name)]
    assert got == {name: expected for name, (_, expected, _) in CORPUS.items()}
    for name, (_, _, expected_reasons) in CORPUS.items():
        assert len(reasons[name]) == len(expected_reasons), (name, reasons[name])
        for reason, expected in zip(reasons[name], expected_reasons, strict=True):
            assert expected in reason, (name, reason)

    for name, (_, rows_in) in BLOCKED.items():
        run, meta = intake.ingest(name)
        assert not run.success, name
        check = run.get_asset_check_evaluations()[0]
        assert check.asset_check_key.name == "rows_valid" and not check.passed
        batch = meta["feedback_batch"]
        assert (batch["rows_in"], batch["valid"], batch["quarantined"]) == (rows_in, 0, rows_in), name
        assert "feedback_events" not in meta and len(intake.quarantined(name)) == rows_in

    assert intake.warehouse_count() == sum(expected[1] for _, expected, _ in CORPUS.values())


def test_quarantine_keeps_huge_rows_short_and_odd_valid_text_arrives_intact(intake):
    intake.land("huge.jsonl", CORPUS["huge.jsonl"][0])
    intake.land("encoding.jsonl", CORPUS["encoding.jsonl"][0])
    intake.tick()
    for name in ("huge.jsonl", "encoding.jsonl"):
        assert intake.ingest(name)[0].success
    assert max(len(q["raw"]) for q in intake.quarantined("huge.jsonl")) == 4096  # RMI_FEEDBACK_MAX_TEXT_CHARS
    stored = intake.resources["warehouse"].query(
        "SELECT event_id, comment FROM feedback_events ORDER BY event_id")
    assert stored.rows() == [("ev-40", None), ("ev-50", None), ("ev-54", ODD_TEXT), ("ev-55", None)]
