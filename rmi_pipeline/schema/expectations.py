"""Feedback schema v1 as a Great Expectations suite, and how it runs on a batch at warehouse speed.

The suite is the one source of truth for what a valid event is: types, required fields, the rating and source
domains, timestamp sanity, text size limits and a unique event_id. parse.py only turns bytes into rows (it cannot
check a row that does not exist yet: malformed JSON, invalid UTF-8); every rule about a row's values is here.

GX on pandas costs about 10x a raw DuckDB copy of the same rows, so GX is asked once per process, through its SQL
datasource on DuckDB, for each expectation's failing-row query (`return_unexpected_index_query`). Each batch then
runs those queries in one DuckDB statement: the rows GX would flag, with counts identical to GX's own
(tests/test_expectations.py checks that against a full GX validation).

    python -m rmi_pipeline.schema.expectations    prints the suite and the SQL each expectation compiles to
"""

from __future__ import annotations

import os
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path

from .fields import EVENT_COLUMNS, FIELDS, REQUIRED_TEXT, SCHEMA_VERSION, STAGING, TEXT_FIELDS

MAX_CLOCK_SKEW = timedelta(days=1)
# the suite is compiled with this as "now" and the check puts the real bound where GX wrote it: the compiled rules
# then hold until the suite or a version changes, not for an hour
COMPILED_NOW = datetime(2999, 1, 1, tzinfo=UTC)
EARLIEST_TS = datetime(2000, 1, 1, tzinfo=UTC)  # older clocks are unset or wrong, not feedback
RFC3339 = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$"
HAS_ZONE = r"(Z|[+-]\d{2}:\d{2})$"
DUPLICATE = "duplicate"  # the action of the uniqueness expectation: the first row is kept, not quarantined


def suite_rules(max_text_chars: int, now: datetime) -> list[tuple[object, str, str]]:
    """(expectation, reason a failing row is quarantined with, action) for schema v1, in reporting order."""
    import great_expectations.expectations as gxe

    q = "quarantine"
    rules = [
        (gxe.ExpectColumnValuesToNotBeNull(column="schema_version"), "schema_version must be a positive integer", q),
        (gxe.ExpectColumnValuesToBeBetween(column="schema_version", min_value=1),
         "schema_version must be a positive integer", q),
        (gxe.ExpectColumnValuesToBeBetween(column="schema_version", max_value=SCHEMA_VERSION),
         f"schema_version is newer than this pipeline understands ({SCHEMA_VERSION})", q),
    ]
    for name in REQUIRED_TEXT:
        reason = "event_id must be a non-empty string" if name == "event_id" else f"{name} must be a string"
        rules.append((gxe.ExpectColumnValuesToNotBeNull(column=name), reason, q))
    rules += [
        (gxe.ExpectColumnValuesToMatchRegex(column="event_id", regex=r"\S"), "event_id must be a non-empty string", q),
        (gxe.ExpectColumnValuesToBeInSet(column="rating_type", value_set=["string"]),
         "rating must be 'up', 'down' or null", q),
        (gxe.ExpectColumnValuesToBeInSet(column="rating", value_set=["up", "down"]),
         "rating must be 'up', 'down' or null", q),
        (gxe.ExpectColumnValuesToNotBeNull(column="source"), "source must be 'user' or 'report'", q),
        (gxe.ExpectColumnValuesToBeInSet(column="source", value_set=["user", "report"]),
         "source must be 'user' or 'report'", q),
    ]
    for name in ("correction", "comment", "skill"):
        rules.append((gxe.ExpectColumnValuesToBeInSet(column=f"{name}_type", value_set=["string"]),
                      f"{name} must be a string or null", q))
    rules += [
        (gxe.ExpectColumnValuesToBeInSet(column="meta_type", value_set=["object"]),
         "meta must be an object or null", q),
        (gxe.ExpectColumnValuesToNotBeNull(column="ts"), "ts must be an RFC 3339 string", q),
        (gxe.ExpectColumnValuesToMatchRegex(column="ts_text", regex=RFC3339), "ts is not RFC 3339", q),
        (gxe.ExpectColumnValuesToMatchRegex(column="ts_text", regex=HAS_ZONE), "ts has no time zone", q),
        (gxe.ExpectColumnValuesToBeBetween(column="ts", min_value=EARLIEST_TS),
         f"ts is out of range (before {EARLIEST_TS:%Y-%m-%d})", q),
        (gxe.ExpectColumnValuesToBeBetween(column="ts", max_value=now + MAX_CLOCK_SKEW), "ts is in the future", q),
    ]
    for name in (*TEXT_FIELDS, "meta"):  # oversized text is quarantined, never truncated
        rules.append((gxe.ExpectColumnValueLengthsToBeBetween(column=name, max_value=max_text_chars),
                      f"{name} too long (over {max_text_chars} chars)", q))
    rules.append((gxe.ExpectColumnValuesToBeUnique(column="event_id"), "event_id repeated in the batch", DUPLICATE))
    return rules


def feedback_suite(max_text_chars: int, now: datetime | None = None):
    """The expectation suite itself, for GX's own tools (data docs, a checkpoint)."""
    import great_expectations as gx

    return gx.ExpectationSuite(name=f"feedback_v{SCHEMA_VERSION}",
                               expectations=[e for e, _, _ in suite_rules(max_text_chars, now or datetime.now(UTC))])


@dataclass(frozen=True)
class Rule:
    expectation: str  # "expect_column_values_to_be_in_set(rating)"
    reason: str
    action: str
    sql: str  # the rows GX would flag: SELECT row, ... FROM staging WHERE ...


@dataclass
class Checked:
    """A batch after the suite: its valid events, quarantined rows and the count of every failed expectation."""

    events: object  # a polars frame, warehouse columns, input order
    quarantined: list[dict] = field(default_factory=list)  # {"row": n, "reason": ...}
    duplicates: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # expectation -> rows that fail it
    evaluated: int = 0  # expectations run on the batch


def check(rows, batch_id: str | None, max_text_chars: int, cache_dir: Path | None = None) -> Checked:
    """Run the suite on staging rows (an Arrow table with STAGING columns) in one DuckDB pass."""
    import polars as pl

    rules = _now(compiled_rules(max_text_chars, cache_dir))
    dup = _ids([i for i, r in enumerate(rules) if r.action == DUPLICATE])
    conn = _database().cursor()  # its own connection: temp tables are private to it and go with it
    try:
        conn.execute("SET TimeZone = 'UTC'")
        conn.register("incoming_rows", rows)
        # the rules read the rows where they are (no copy); only the parsed timestamp is materialized
        conn.execute("CREATE TEMP TABLE parsed_ts AS "
                     "SELECT coalesce(ts_value, TRY_CAST(ts_text AS TIMESTAMPTZ)) AS ts FROM incoming_rows")
        conn.execute("CREATE TEMP VIEW staging AS SELECT * FROM incoming_rows POSITIONAL JOIN parsed_ts")
        union = " UNION ALL ".join(f"SELECT {i} AS rule, row FROM ({r.sql.rstrip().rstrip(';')}) AS rule_{i}"
                                   for i, r in enumerate(rules))
        conn.execute(f"CREATE TEMP TABLE failing AS {union}")
        counts = dict(conn.execute("SELECT rule, count(*) FROM failing GROUP BY rule").fetchall())
        bad = conn.execute(f"SELECT row, list(rule ORDER BY rule) FROM failing WHERE rule NOT IN ({dup}) "
                           "GROUP BY row ORDER BY row").fetchall()
        conn.execute(f"CREATE TEMP TABLE bad AS SELECT DISTINCT row FROM failing WHERE rule NOT IN ({dup})")
        # a repeated event_id: the first valid row is the event, later valid ones are duplicates
        conn.execute(f"""CREATE TEMP TABLE repeated AS SELECT row FROM (
            SELECT s.row, row_number() OVER (PARTITION BY s.event_id ORDER BY s.row) AS n FROM staging s
            SEMI JOIN (SELECT row FROM failing WHERE rule IN ({dup})) USING (row) ANTI JOIN bad USING (row)
        ) WHERE n > 1""")
        excluded = [r for (r,) in conn.execute("SELECT row FROM bad UNION ALL SELECT row FROM repeated").fetchall()]
        parsed_ts = conn.sql("SELECT ts FROM parsed_ts").fetch_arrow_table()["ts"]
    finally:
        conn.close()
    duplicates = len(excluded) - len(bad)
    # the valid events are the input rows themselves: no string is copied out of DuckDB
    events = pl.from_arrow(rows, rechunk=False).with_columns(ts=pl.from_arrow(parsed_ts, rechunk=False))
    if excluded:
        events = events.filter(~pl.col("row").is_in(excluded))
    events = events.select(*(c for c in EVENT_COLUMNS if c in FIELDS), batch_id=pl.lit(batch_id, dtype=pl.String),
                           tier=pl.lit(None, dtype=pl.Int64))
    quarantined = [{"row": row, "reason": "; ".join(dict.fromkeys(rules[i].reason for i in ids))} for row, ids in bad]
    return Checked(events=events, quarantined=quarantined, duplicates=duplicates, evaluated=len(rules),
                   failed={rules[i].expectation: n for i, n in sorted(counts.items())})


@lru_cache(maxsize=1)
def _database():
    """One in-memory DuckDB per process for checking batches (opening one costs about 10 ms)."""
    import duckdb

    return duckdb.connect()


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids)) or "-1"


def _bound(now: datetime) -> str:
    """The 'not in the future' bound as GX writes a timestamp into SQL."""
    return f"'{now.replace(microsecond=0) + MAX_CLOCK_SKEW}'"


def _now(rules: list[Rule]) -> list[Rule]:
    """The rules with the clock's bound where GX wrote COMPILED_NOW's."""
    bound = _bound(datetime.now(UTC))
    return [replace(r, sql=r.sql.replace(_bound(COMPILED_NOW), bound)) for r in rules]


@lru_cache(maxsize=4)
def compiled_rules(max_text_chars: int, cache_dir: Path | None = None) -> list[Rule]:
    """Each expectation's failing-row SQL, as GX writes it for DuckDB (with COMPILED_NOW's bound: see _now).

    Every ingest run is a process of its own, and importing GX costs seconds: what GX wrote is kept in `cache_dir`
    (RMI_CACHE_DIR, shared by every home), keyed by the source of the suite, its fields and its dialect and by the
    versions that wrote it. Without a `cache_dir` the rules are compiled once per process."""
    import hashlib
    import json
    from importlib import metadata

    from . import fields, gx_duckdb

    if cache_dir is None:
        return _compile(max_text_chars)
    sources = [Path(m.__file__).read_text() for m in (fields, gx_duckdb)] + [Path(__file__).read_text()]
    versions = [metadata.version(p) for p in ("great-expectations", "duckdb-engine", "sqlalchemy", "duckdb")]
    key = hashlib.sha256(json.dumps([sources, versions, max_text_chars]).encode())
    cached = cache_dir / f"feedback-suite-{key.hexdigest()[:16]}.json"
    try:
        return [Rule(**r) for r in json.loads(cached.read_text())]
    except (OSError, ValueError, TypeError):
        pass
    rules = _compile(max_text_chars)
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps([asdict(r) for r in rules]))
    partial.replace(cached)
    return rules


def _compile(max_text_chars: int) -> list[Rule]:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    import sqlalchemy as sa

    from .gx_duckdb import register_dialect

    register_dialect()
    rules = suite_rules(max_text_chars, COMPILED_NOW)
    url = f"duckdb+rmi:///:memory:rmi_rules_{uuid.uuid4().hex}"  # GX opens several connections: a named database
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            columns = ", ".join(f"{name} {kind}" for name, kind in {**STAGING, "ts": "TIMESTAMPTZ"}.items())
            conn.exec_driver_sql(f"CREATE TABLE staging ({columns})")
            conn.commit()
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = {"globally": False, "metric_calculations": False}
        batch = (context.data_sources.add_sql("feedback", connection_string=url)
                 .add_table_asset("staging", table_name="staging").add_batch_definition_whole_table("batch")
                 .get_batch())
        for i, (expectation, _, _) in enumerate(rules):
            expectation.meta = {"rule": i}  # GX reports results in its own order
        suite = gx.ExpectationSuite(name=f"feedback_v{SCHEMA_VERSION}", expectations=[e for e, _, _ in rules])
        result = batch.validate(suite, result_format={"result_format": "BOOLEAN_ONLY", "return_unexpected_index_query":
                                                      True, "unexpected_index_column_names": ["row"]})
    finally:
        engine.dispose()
    sql = {r.expectation_config.meta["rule"]: r.result.get("unexpected_index_query") for r in result.results}
    for i, (expectation, _, _) in enumerate(rules):
        if not sql.get(i):
            failed = next(r for r in result.results if r.expectation_config.meta["rule"] == i)
            raise RuntimeError(f"GX could not compile {expectation.expectation_type}: {failed.exception_info}")
    if not any(_bound(COMPILED_NOW) in q for q in sql.values()):
        raise RuntimeError(f"GX wrote the 'ts is in the future' bound otherwise than {_bound(COMPILED_NOW)}")
    return [Rule(label(e), reason, action, sql[i]) for i, (e, reason, action) in enumerate(rules)]


def label(expectation) -> str:
    """A short name for an expectation, unique in the suite: 'expect_column_values_to_be_between(ts, max)'."""
    detail = ""
    if expectation.expectation_type == "expect_column_values_to_be_between":
        detail = ", min" if expectation.min_value is not None else ", max"
    elif expectation.expectation_type == "expect_column_values_to_match_regex":
        detail = {RFC3339: ", rfc3339", HAS_ZONE: ", zone"}.get(expectation.regex, ", non-blank")
    return f"{expectation.expectation_type}({expectation.column}{detail})"


if __name__ == "__main__":
    for rule in _now(compiled_rules(4096)):
        print(f"{rule.expectation}  [{rule.action}: {rule.reason}]\n    {' '.join(rule.sql.split())}\n")
