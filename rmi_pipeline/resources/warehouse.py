"""The feedback warehouse: one DuckDB file, idempotent on event_id, with the views a team queries.

Views (all times in UTC):
    feedback_quality   events, thumbs-down rate and corrections per model version and skill
    feedback_daily     the same per day, model version, skill and tier: is a release or a slice getting worse?
    feedback_corrections  every correction with its prompt, the answer it replaced and where it came from
    failing_prompts    prompts ranked by thumbs-down, with their most recent correction
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from dagster import ConfigurableResource

SCHEMA = """
CREATE TABLE IF NOT EXISTS feedback_events (
    event_id VARCHAR PRIMARY KEY,
    schema_version INTEGER,
    ts TIMESTAMPTZ,
    user_id VARCHAR,
    model_version VARCHAR,
    prompt VARCHAR,
    completion VARCHAR,
    rating VARCHAR,
    correction VARCHAR,
    comment VARCHAR,
    source VARCHAR,
    skill VARCHAR,
    meta JSON,
    batch_id VARCHAR,
    ingested_at TIMESTAMPTZ DEFAULT current_timestamp
);
-- tier is not in schema v1: it is filled at ingest from the recipe (NULL when the prompt is not one it knows);
-- warehouses created before it gain the column here
ALTER TABLE feedback_events ADD COLUMN IF NOT EXISTS tier INTEGER;
CREATE OR REPLACE VIEW feedback_quality AS
SELECT model_version, skill,
       count(*) AS events,
       avg(CASE WHEN rating = 'down' THEN 1.0 WHEN rating = 'up' THEN 0.0 END) AS thumbs_down_rate,
       count(correction) AS corrections
FROM feedback_events GROUP BY ALL ORDER BY model_version, skill;
CREATE OR REPLACE VIEW feedback_daily AS
SELECT (ts AT TIME ZONE 'UTC')::DATE AS day, model_version, skill, tier,
       count(*) AS events,
       count(*) FILTER (rating = 'down') AS thumbs_down,
       avg(CASE WHEN rating = 'down' THEN 1.0 WHEN rating = 'up' THEN 0.0 END) AS thumbs_down_rate,
       count(correction) AS corrections
FROM feedback_events GROUP BY ALL ORDER BY day, model_version, skill, tier;
CREATE OR REPLACE VIEW feedback_corrections AS
SELECT ts, model_version, skill, tier, prompt, completion, correction, user_id, source, batch_id, event_id
FROM feedback_events WHERE correction IS NOT NULL ORDER BY ts DESC, event_id;
CREATE OR REPLACE VIEW failing_prompts AS
SELECT prompt, any_value(skill) AS skill, any_value(tier) AS tier,
       count(*) FILTER (rating = 'down') AS thumbs_down,
       count(rating) AS rated,
       avg(CASE WHEN rating = 'down' THEN 1.0 WHEN rating = 'up' THEN 0.0 END) AS thumbs_down_rate,
       count(correction) AS corrections,
       arg_max(correction, ts) FILTER (correction IS NOT NULL) AS latest_correction,
       max(ts) AS last_seen
FROM feedback_events GROUP BY prompt HAVING count(*) FILTER (rating = 'down') > 0
ORDER BY thumbs_down DESC, thumbs_down_rate DESC, prompt;
"""
COLUMNS = ["event_id", "schema_version", "ts", "user_id", "model_version", "prompt", "completion", "rating",
           "correction", "comment", "source", "skill", "meta", "batch_id", "tier"]
VIEWS = ("feedback_quality", "feedback_daily", "feedback_corrections", "failing_prompts")


class Warehouse(ConfigurableResource):
    path: str

    @contextmanager
    def connect(self, read_only: bool = False):
        import duckdb

        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        if read_only and not Path(self.path).exists():
            read_only = False  # nothing to protect yet: create the empty warehouse
        conn = duckdb.connect(self.path, read_only=read_only)
        try:
            if not read_only:
                conn.execute(SCHEMA)
            yield conn
        finally:
            conn.close()

    def migrate(self) -> None:
        """Bring a warehouse file written by an older version up to this schema (new columns, the views)."""
        with self.connect():
            pass

    def ingest(self, events) -> tuple[int, int]:
        """Insert validated events (a polars frame with COLUMNS); returns (ingested, duplicates)."""
        import polars as pl

        if "tier" not in events.columns:  # validated before tiers existed
            events = events.with_columns(pl.lit(None, dtype=pl.Int64).alias("tier"))
        with self.connect() as conn:
            conn.register("incoming", events.select(COLUMNS).to_arrow())
            before = conn.execute("SELECT count(*) FROM feedback_events").fetchone()[0]
            conn.execute(f"INSERT OR IGNORE INTO feedback_events ({', '.join(COLUMNS)}) "
                         f"SELECT {', '.join(COLUMNS)} FROM incoming")
            after = conn.execute("SELECT count(*) FROM feedback_events").fetchone()[0]
        ingested = after - before
        return ingested, len(events) - ingested

    def query(self, sql: str, params: list | None = None):
        """A polars frame of a read-only query."""
        with self.connect(read_only=True) as conn:
            return conn.sql(sql, params=params).pl() if params else conn.sql(sql).pl()
