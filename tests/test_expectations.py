"""The schema v1 expectation suite (Great Expectations): what fails it is counted per expectation in the rows_valid
check, quarantined with its reasons, and the counts add up; the one-pass DuckDB run counts what GX itself counts."""

import io
import json
import os
import subprocess
import sys

import polars as pl
import pytest
from dagster import instance_for_test
from feedback_intake import Intake, event

from rmi_pipeline.resources import build_resources
from rmi_pipeline.schema import parse_batch, read_rows
from rmi_pipeline.settings import Feedback

BAD = [
    event(1),
    event(2, rating="sideways"),  # domain
    event(3, rating=["down"]),  # type
    event(4, prompt=...),  # required field
    event(5, ts="2026-11-30T10:00:00"),  # no time zone
    event(6, ts="2999-01-01T00:00:00Z"),  # in the future
    event(7, ts="1970-01-01T00:00:00Z"),  # before any real feedback
    event(8, comment="c" * 5000),  # text size
    event(9, schema_version=2),  # from the future
    event(10, event_id=" "),  # blank id
    event(11, skill=7, source="bot"),  # two expectations in one row
    event(1, rating="down"),  # a repeated event_id: a duplicate, not a bad row
    event(12),
]
FAILED = {  # expectation -> rows failing it, as the UI shows them on the rows_valid check
    "expect_column_values_to_be_in_set(rating)": 1,
    "expect_column_values_to_be_in_set(rating_type)": 1,
    "expect_column_values_to_not_be_null(prompt)": 1,
    "expect_column_values_to_match_regex(ts_text, zone)": 1,
    "expect_column_values_to_be_between(ts, max)": 1,
    "expect_column_values_to_be_between(ts, min)": 1,
    "expect_column_value_lengths_to_be_between(comment)": 1,
    "expect_column_values_to_be_between(schema_version, max)": 1,
    "expect_column_values_to_match_regex(event_id, non-blank)": 1,
    "expect_column_values_to_be_in_set(skill_type)": 1,
    "expect_column_values_to_be_in_set(source)": 1,
    "expect_column_values_to_be_unique(event_id)": 2,  # GX counts every row of a repeated id
}


@pytest.fixture
def intake(rmi_env):
    with instance_for_test() as instance:
        yield Intake(build_resources(rmi_env.model_copy(update={"feedback": Feedback(max_bad_share=0.9)})), instance)


def test_each_failed_expectation_is_counted_on_the_check_and_bad_rows_wait_in_quarantine(intake):
    intake.land("mixed.jsonl", "\n".join([*BAD, "{not json"]).encode())
    intake.tick()
    run, meta = intake.ingest("mixed.jsonl")
    assert run.success
    check = run.get_asset_check_evaluations()[0]
    assert check.asset_check_key.name == "rows_valid" and check.passed
    got = {k: v.value for k, v in check.metadata.items()}
    assert got["failed_expectations"] == FAILED
    assert got["expectations_evaluated"] == 34 and got["rows_not_parsed"] == 1
    assert "| `expect_column_values_to_be_in_set(rating)` | 1 |" in got["expectations"]

    reasons = {q["row"]: q["reason"] for q in intake.quarantined("mixed.jsonl")}
    assert reasons == {
        2: "rating must be 'up', 'down' or null", 3: "rating must be 'up', 'down' or null",
        4: "prompt must be a string", 5: "ts has no time zone", 6: "ts is in the future",
        7: "ts is out of range (before 2000-01-01)", 8: "comment too long (over 4096 chars)",
        9: "schema_version is newer than this pipeline understands (1)", 10: "event_id must be a non-empty string",
        11: "source must be 'user' or 'report'; skill must be a string or null",
        14: "malformed JSON: Expecting property name enclosed in double quotes",
    }
    counts = meta["feedback_events"]
    assert counts["rows_in"] == counts["ingested"] + counts["duplicates"] + counts["quarantined"] == 14
    assert (counts["ingested"], counts["duplicates"], counts["quarantined"]) == (2, 1, 11)
    assert intake.warehouse_count() == 2


def test_a_batch_over_the_bad_share_fails_its_check_with_the_counts_and_the_next_batch_lands(intake):
    strict = Feedback(max_bad_share=0.5)
    intake.resources["settings"] = intake.resources["settings"].model_copy(update={"feedback": strict})
    intake.land("broken.jsonl", "\n".join([event(1), event(2, rating="meh"), event(3, rating="meh")]).encode())
    intake.land("fine.jsonl", event(4).encode())
    intake.tick()
    run, meta = intake.ingest("broken.jsonl")
    check = run.get_asset_check_evaluations()[0]
    assert not run.success and not check.passed
    assert check.metadata["failed_expectations"].value == {"expect_column_values_to_be_in_set(rating)": 2}
    assert [q["reason"] for q in intake.quarantined("broken.jsonl")] == [
        "rating must be 'up', 'down' or null"] * 2 + ["batch quarantined whole: 67% bad rows > 50%"]
    assert meta["feedback_batch"]["rows_in"] == meta["feedback_batch"]["quarantined"] == 3
    assert intake.ingest("fine.jsonl")[0].success and intake.warehouse_count() == 1


def test_the_one_pass_counts_exactly_what_great_expectations_counts():
    """The same staging rows validated by GX itself (pandas engine): every expectation fails on the same rows."""
    import duckdb
    import great_expectations as gx

    from rmi_pipeline.schema.expectations import check, feedback_suite, label

    rows = read_rows("b.jsonl", "\n".join([*BAD, event(13, meta=[1]), event(14, user_id=5)]).encode()).table
    ours = check(rows, "b", 4096).failed
    with duckdb.connect() as conn:  # the rows exactly as the suite sees them, parsed timestamp included
        conn.execute("SET TimeZone = 'UTC'")
        conn.register("incoming_rows", rows)
        frame = conn.sql("SELECT *, coalesce(ts_value, TRY_CAST(ts_text AS TIMESTAMPTZ)) AS ts "
                         "FROM incoming_rows").df()
    batch = (gx.get_context(mode="ephemeral").data_sources.add_pandas("p").add_dataframe_asset("rows")
             .add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": frame}))
    suite = feedback_suite(4096)
    result = batch.validate(suite, result_format="SUMMARY")
    theirs = {label(r.expectation_config.to_domain_obj()): r.result["unexpected_count"]
              for r in result.results if not r.success}
    assert all(r.exception_info["raised_exception"] is False for r in result.results)
    assert ours == theirs and len(theirs) == len(FAILED) + 2


def test_the_same_events_as_parquet_and_as_json_lines_give_the_same_events_and_reasons():
    # a Parquet column has one type: the rows with a list rating or a numeric skill cannot be written
    records = [{**r, "meta": {"client": "web"}} for r in map(json.loads, BAD)
               if isinstance(r["rating"], str) and not isinstance(r["skill"], int)]
    jsonl = parse_batch("b.jsonl", "\n".join(json.dumps(r) for r in records).encode(), "b", 4096)
    buf = io.BytesIO()
    pl.DataFrame(records).write_parquet(buf)
    parquet = parse_batch("b.parquet", buf.getvalue(), "b", 4096)
    assert parquet.frame.equals(jsonl.frame) and parquet.frame.height == 2
    assert [q["reason"] for q in parquet.quarantined] == [q["reason"] for q in jsonl.quarantined]
    assert parquet.failed_expectations == jsonl.failed_expectations


def test_parquet_with_unknown_columns_keeps_them_in_meta_and_typed_columns_are_checked():
    buf = io.BytesIO()
    pl.DataFrame({"event_id": [1, 2], "ts": ["2026-11-30T10:00:00Z"] * 2, "user_id": ["u", "u"],
                  "model_version": ["1", "1"], "prompt": ["1+1=", "2+2="], "completion": ["2", "4"]}).write_parquet(buf)
    wrong = parse_batch("w.parquet", buf.getvalue(), "w", 4096)
    assert wrong.frame.is_empty()
    assert {q["reason"] for q in wrong.quarantined} == {"event_id must be a non-empty string"}
    buf = io.BytesIO()
    pl.DataFrame({"event_id": ["a"], "ts": ["2026-11-30T10:00:00Z"], "user_id": ["u"], "model_version": ["1"],
                  "prompt": ["1+1="], "completion": ["2"], "latency_ms": [31]}).write_parquet(buf)
    kept = parse_batch("k.parquet", buf.getvalue(), "k", 4096)
    assert json.loads(kept.events[0]["meta"]) == {"latency_ms": 31} and kept.events[0]["source"] == "user"


def test_a_later_ingest_process_runs_the_suite_without_importing_gx(tmp_path):
    """Each ingest run is a process: GX compiles the suite once, later runs read it from RMI_CACHE_DIR."""
    code = ("import sys; from pathlib import Path; from rmi_pipeline.schema import parse_batch; "
            f"p = parse_batch('b.jsonl', {event(1, rating='meh').encode()!r}, 'b', 4096, Path({str(tmp_path)!r})); "
            "print(p.failed_expectations, 'great_expectations' in sys.modules)")
    env = dict(os.environ)

    def run() -> str:
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.strip()

    counts = "{'expect_column_values_to_be_in_set(rating)': 1}"
    assert run() == f"{counts} True"
    assert run() == f"{counts} False"


def test_the_compiled_suite_s_future_bound_is_the_clock_s_at_every_check(tmp_path):
    """The rules are compiled once for good, so 'ts is in the future' must take the clock's time when it runs: a
    day and an hour ahead of now is quarantined, an hour ahead is not (the clocks of clients may differ by a day)."""
    from datetime import UTC, datetime, timedelta

    def ahead(hours: float) -> str:
        return (datetime.now(UTC) + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")

    batch = "\n".join([event(1, ts=ahead(1)), event(2, ts=ahead(25))]).encode()
    for _ in range(2):  # compiled, then from the cache
        parsed = parse_batch("b.jsonl", batch, "b", 4096, tmp_path)
        assert [e["event_id"] for e in parsed.events] == ["ev-1"]
        assert [q["reason"] for q in parsed.quarantined] == ["ts is in the future"]
