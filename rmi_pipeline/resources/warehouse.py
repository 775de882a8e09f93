"""The feedback warehouse: one DuckDB file, idempotent on event_id."""

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
CREATE OR REPLACE VIEW feedback_quality AS
SELECT model_version, skill,
       count(*) AS events,
       avg(CASE WHEN rating = 'down' THEN 1.0 WHEN rating = 'up' THEN 0.0 END) AS thumbs_down_rate,
       count(correction) AS corrections
FROM feedback_events GROUP BY ALL ORDER BY model_version, skill;
"""
COLUMNS = ["event_id", "schema_version", "ts", "user_id", "model_version", "prompt", "completion", "rating",
           "correction", "comment", "source", "skill", "meta", "batch_id"]


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

    def ingest(self, events) -> tuple[int, int]:
        """Insert validated events (a polars frame with COLUMNS); returns (ingested, duplicates)."""
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
