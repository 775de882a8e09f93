"""The feedback warehouse: one DuckDB file, idempotent on event_id, with the views a team queries.

Views (all times in UTC):
    feedback_quality   events, thumbs-down rate and corrections per model version and skill
    feedback_daily     the same per day, model version, skill and tier: is a release or a slice getting worse?
    feedback_corrections  every correction with its prompt, the answer it replaced and where it came from
    failing_prompts    prompts ranked by thumbs-down, with their most recent correction

Idempotence without a PRIMARY KEY: DuckDB reloads a key index from disk on every connection, so an insert took
twice as long into 10M events as into 10k. Each event keeps `id_key` (a 64-bit hash of its event_id) instead; a
batch scans that one narrow column for its keys, then compares the full event_id of the few hits, so a hash
collision never drops an event and a batch costs about the same however large the warehouse grows.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from dagster import ConfigurableResource

from ..schema import EVENT_COLUMNS

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS feedback_events (
    {", ".join(f"{name} {kind}" for name, kind in EVENT_COLUMNS.items())},
    ingested_at TIMESTAMPTZ DEFAULT current_timestamp
);
-- warehouses created before tier (not in schema v1, filled from the recipe at ingest) gain the column here
ALTER TABLE feedback_events ADD COLUMN IF NOT EXISTS tier INTEGER;
ALTER TABLE feedback_events ADD COLUMN IF NOT EXISTS id_key UBIGINT;  -- hash(event_id): see the module docstring
CREATE TABLE IF NOT EXISTS warehouse_info (key VARCHAR, value VARCHAR);
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
VIEWS = ("feedback_quality", "feedback_daily", "feedback_corrections", "failing_prompts")
KEY = "hash(event_id)"  # id_key of an event: 64 bits, so a batch scans 8 bytes per stored event, not its id


class Warehouse(ConfigurableResource):
    path: str
    lock_timeout_seconds: float = 300.0  # how long to wait for another process's writer lock

    @contextmanager
    def connect(self, read_only: bool = False):
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        if read_only and not Path(self.path).exists():
            read_only = False  # nothing to protect yet: create the empty warehouse
        conn = self._open(read_only)
        try:
            if not read_only:
                _drop_primary_key(conn)
                conn.execute(SCHEMA)
                _refresh_keys(conn)
            yield conn
        finally:
            conn.close()

    def _open(self, read_only: bool):
        """A connection, once no other process holds the file: DuckDB allows one writing process at a time (and
        no reader beside it), so concurrent ingests queue here, with backoff, for up to lock_timeout_seconds."""
        import duckdb
        from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

        held = lambda exc: isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()  # noqa: E731
        try:
            for attempt in Retrying(retry=retry_if_exception(held), stop=stop_after_delay(self.lock_timeout_seconds),
                                    wait=wait_exponential(multiplier=0.05, max=2.0), reraise=True):
                with attempt:
                    return duckdb.connect(self.path, read_only=read_only)
        except duckdb.IOException as exc:
            if "database file with version number" in str(exc):  # written by a newer DuckDB (say, before the pin)
                raise RuntimeError(
                    f"the warehouse {self.path} was written by a newer DuckDB than this one ({duckdb.__version__}), "
                    "which cannot read it: `rmi run --fresh` starts the loop over, or EXPORT "
                    "DATABASE with that DuckDB and IMPORT DATABASE here") from None
            if not held(exc):
                raise
            raise TimeoutError(f"the warehouse {self.path} is held by another process for more than "
                               f"{self.lock_timeout_seconds:.0f} s (RMI_WAREHOUSE_LOCK_TIMEOUT_SECONDS): "
                               f"{str(exc).splitlines()[0]}") from None

    def migrate(self) -> None:
        """Bring a warehouse file written by an older version up to this schema (new columns, the views)."""
        with self.connect():
            pass

    def ingest(self, events) -> tuple[int, int]:
        """Insert validated events (a polars frame with EVENT_COLUMNS) not already there; returns (ingested,
        duplicates).

        An event_id repeated inside `events` counts once, like one already in the warehouse."""
        import polars as pl

        if "tier" not in events.columns:  # validated before tiers existed
            events = events.with_columns(pl.lit(None, dtype=pl.Int64).alias("tier"))
        columns = ", ".join(EVENT_COLUMNS)
        with self.connect() as conn:
            conn.register("incoming", events.select(list(EVENT_COLUMNS)).to_arrow(compat_level=pl.CompatLevel.newest()))
            conn.execute("BEGIN")
            conn.execute(f"CREATE TEMP TABLE batch AS SELECT {columns}, {KEY} AS id_key FROM incoming")
            # the stored keys this batch hits (one narrow column scanned), then the full ids behind those hits
            conn.execute("CREATE TEMP TABLE hit AS SELECT DISTINCT id_key FROM feedback_events "
                         "SEMI JOIN batch USING (id_key)")
            conn.execute("CREATE TEMP TABLE seen AS SELECT event_id FROM feedback_events SEMI JOIN hit USING (id_key)")
            ingested = conn.execute(
                f"INSERT INTO feedback_events ({columns}, id_key) SELECT {columns}, id_key FROM batch "
                "ANTI JOIN seen USING (event_id) QUALIFY row_number() OVER (PARTITION BY event_id) = 1"
            ).fetchall()[0][0]
            conn.execute("COMMIT")
        return ingested, len(events) - ingested

    def query(self, sql: str, params: list | None = None):
        """A polars frame of a read-only query."""
        with self.connect(read_only=True) as conn:
            return conn.sql(sql, params=params).pl() if params else conn.sql(sql).pl()


def _drop_primary_key(conn) -> None:
    """A warehouse from before id_key has event_id as PRIMARY KEY: rebuilt once without it (DuckDB cannot drop
    a constraint in place)."""
    keyed = conn.execute("SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'feedback_events' "
                         "AND constraint_type = 'PRIMARY KEY'").fetchall()[0][0]
    if not keyed:
        return
    conn.execute("BEGIN")
    conn.execute("CREATE TABLE feedback_events_rebuilt AS SELECT * FROM feedback_events")
    conn.execute("DROP TABLE feedback_events CASCADE")
    conn.execute("ALTER TABLE feedback_events_rebuilt RENAME TO feedback_events")
    conn.execute("COMMIT")


def _refresh_keys(conn) -> None:
    """Stored keys follow the running DuckDB's hash: computed for a warehouse that has none yet, and anew after
    an upgrade that changed the hash."""
    stored = conn.execute("SELECT value FROM warehouse_info WHERE key = 'id_key_probe'").fetchall()
    # DuckDB's hash may change between versions: a probe value tells whether the stored keys still match
    current = conn.execute(f"SELECT ({KEY})::VARCHAR FROM (SELECT 'rmi-event-id' AS event_id)").fetchall()[0][0]
    if stored and stored[0][0] == current:
        return
    conn.execute("BEGIN")
    conn.execute(f"UPDATE feedback_events SET id_key = {KEY}")
    conn.execute("DELETE FROM warehouse_info WHERE key = 'id_key_probe'")
    conn.execute("INSERT INTO warehouse_info VALUES ('id_key_probe', ?)", [current])
    conn.execute("COMMIT")
