"""The feedback warehouse: a DuckLake table many writers share, idempotent on event_id, with the views a team queries.

Where it lives: the catalog (which Parquet files make the table, snapshot by snapshot) in a SQLite file under
RMI_HOME by default, or in PostgreSQL; the Parquet files in a folder beside it, or on s3://. Any number of processes
(run pods) ingest and query at once; none needs a volume another one mounts.

Views (all times in UTC):
    feedback_quality   events, thumbs-down rate and corrections per model version and skill
    feedback_daily     the same per day, model version, skill and tier: is a release or a slice getting worse?
    feedback_corrections  every correction with its prompt, the answer it replaced and where it came from
    failing_prompts    prompts ranked by thumbs-down, with their most recent correction
    feedback_redactions  personal data replaced by placeholders at ingest, per day and entity type (no values)

Idempotence without a PRIMARY KEY (DuckLake has none, and DuckDB reloaded a key index on every connection): each event
keeps `id_key` (a 64-bit hash of its event_id); a batch scans that one narrow column for its keys, then compares the
full event_id of the few hits, so a hash collision never drops an event and a batch costs about the same however
large the warehouse grows.

Exactly once with many writers: DuckLake commits optimistically and lets two appends to one table both commit, so
two ingests that each look for their ids before inserting could both store one event (measured on PostgreSQL: 4
writers with overlapping batches stored 22,000 rows for 5,500 events). Each ingest therefore also bumps the one row
of `ingest_turn`: two ingests that overlap in time conflict there, the later commit fails, and it runs again against
what the earlier one stored.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from contextlib import closing, contextmanager
from pathlib import Path

from dagster import ConfigurableResource

from ..schema import EVENT_COLUMNS
from ..settings import Settings

# a thumb counts only on the model's whole answer: one the client's max_tokens or stop text cut (meta.cut, which
# rmi serve writes) rates a text the model did not choose to end
WHOLE_ANSWER = "(meta->>'cut') IS NULL"
SCHEMA_VERSION = "4"  # bump when SCHEMA changes: writers run it only when the stored version differs
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS feedback_events (
    {", ".join(f"{name} {kind}" for name, kind in EVENT_COLUMNS.items())},
    ingested_at TIMESTAMPTZ
);
ALTER TABLE feedback_events ADD COLUMN IF NOT EXISTS id_key UBIGINT;  -- hash(event_id): see the module docstring
CREATE TABLE IF NOT EXISTS warehouse_info (key VARCHAR, value VARCHAR);
CREATE TABLE IF NOT EXISTS batch_redactions (batch_id VARCHAR, entity_type VARCHAR, found BIGINT,
                                             landed_at TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS ingest_turn (turn BIGINT);  -- one row each ingest bumps: see the module docstring
INSERT INTO ingest_turn SELECT 0 WHERE NOT EXISTS (FROM ingest_turn);
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
CREATE OR REPLACE VIEW feedback_redactions AS
SELECT (landed_at AT TIME ZONE 'UTC')::DATE AS day, entity_type, sum(found) AS found,
       count(DISTINCT batch_id) AS batches
FROM batch_redactions GROUP BY ALL ORDER BY day, entity_type;
"""
VIEWS = ("feedback_quality", "feedback_daily", "feedback_corrections", "failing_prompts", "feedback_redactions")
KEY = "hash(event_id)"  # id_key of an event: 64 bits, so a batch scans 8 bytes per stored event, not its id
# what another writer's commit, or the catalog's own lock, answers: worth another try, not an error
RETRYABLE = ("transaction conflict", "database is locked", "maximum retry count", "could not serialize",
             "deadlock detected")
_LAKES: dict[tuple, tuple] = {}  # (process, catalog, data path, endpoint, memory limit) -> (DuckDB, catalog file)
_LAKES_LOCK = threading.Lock()


class Warehouse(ConfigurableResource):
    path: str  # the catalog's SQLite file, unless `catalog` is PostgreSQL
    catalog: str | None = None  # "postgres:dbname=... host=... user=...": the password comes from PGPASSWORD
    data_url: str | None = None  # where the Parquet files live: a folder or s3://bucket/prefix/; default beside path
    s3_endpoint_url: str | None = None  # for an s3:// data_url on MinIO or a local S3; default AWS_ENDPOINT_URL_S3
    lock_timeout_seconds: float = 300.0  # how long a writer retries commits that lost to another writer's

    @classmethod
    def from_settings(cls, settings: Settings) -> Warehouse:
        return cls(path=str(settings.resolved_warehouse_path), catalog=settings.warehouse.catalog,
                   data_url=settings.warehouse.data_url, s3_endpoint_url=settings.storage.s3_endpoint_url,
                   lock_timeout_seconds=settings.warehouse.lock_timeout_seconds)

    @contextmanager
    def connect(self, read_only: bool = False):
        """A DuckDB connection with the lake attached as the default database: `feedback_events` and the views
        resolve as before. Writers bring the lake up to this schema first (once per change, not per connection).

        It is a cursor of this process's own DuckDB, where the lake stays attached (see _lake): loading the
        extensions into a fresh DuckDB costs about 0.15 s, and a cycle opens the warehouse a dozen times."""
        conn = self._lake().cursor()

        def prepare() -> None:
            conn.execute("USE lake")
            if not read_only:
                self._ensure_schema(conn)

        try:
            # any statement reads the lake's latest snapshot, which a writer beside it may hold locked a moment
            self._retrying(prepare)
            yield conn
        finally:
            conn.close()

    def migrate(self) -> None:
        """Bring a warehouse written by an older version up to this schema (new columns, the views)."""
        with self.connect():
            pass

    def ingest(self, events, batch: str | None = None, redacted: dict[str, int] | None = None) -> tuple[int, int]:
        """Insert validated events (a polars frame with EVENT_COLUMNS) not already there, and what redaction
        replaced in `batch` (entity type -> count) once; returns (ingested, duplicates).

        An event_id repeated inside `events` counts once, like one already in the warehouse, or one that another
        writer committed while this one ran."""
        import polars as pl

        columns = ", ".join(EVENT_COLUMNS)
        incoming = events.select(list(EVENT_COLUMNS)).to_arrow(compat_level=pl.CompatLevel.newest())
        with self.connect() as conn:
            # the stored keys this batch hits (one narrow column scanned), then the full ids behind those hits
            insert = (f"INSERT INTO feedback_events ({columns}, id_key, ingested_at) "
                      "WITH hit AS MATERIALIZED (SELECT DISTINCT id_key FROM feedback_events SEMI JOIN temp.batch "
                      "USING (id_key)), seen AS MATERIALIZED (SELECT event_id FROM feedback_events SEMI JOIN hit "
                      f"USING (id_key)) SELECT {columns}, id_key, current_timestamp FROM temp.batch "
                      "ANTI JOIN seen USING (event_id) QUALIFY row_number() OVER (PARTITION BY event_id) = 1")

            def commit() -> int:  # all of it again after a lost commit or a locked catalog
                conn.register("incoming", incoming)
                conn.execute(f"CREATE OR REPLACE TEMP TABLE batch AS SELECT {columns}, {KEY} AS id_key FROM incoming")
                def work() -> int:
                    added = conn.execute(insert).fetchall()[0][0]
                    if redacted:
                        conn.execute("INSERT INTO batch_redactions SELECT ?, unnest(?), unnest(?), current_timestamp "
                                     "WHERE NOT EXISTS (FROM batch_redactions WHERE batch_id = ?)",
                                     [batch, list(redacted), list(redacted.values()), batch])
                    return added

                # the turn's bump conflicts with any ingest beside it
                return _transaction(conn, work, "UPDATE ingest_turn SET turn = turn + 1")

            ingested = self._retrying(commit)
        return ingested, len(events) - ingested

    def forget(self, where: str, params: list, on_deleted=None) -> int:
        """Delete the events `where` holds for and leave no trace of them in the lake: returns the rows deleted
        (and tells `on_deleted(n)` as soon as the delete commits, before the cleaning that follows).

        A DuckLake delete only marks rows deleted: their Parquet files, the snapshots before it (time travel), the
        rows it inlined in the catalog and the catalog's min/max statistics still hold them. So after the delete,
        inlined rows are flushed to files, every older snapshot is expired, each file with a deleted row is
        rewritten, the files no snapshot names are removed, and a SQLite catalog is vacuumed (deleted rows stay in
        free pages until then). Each part is safe to run again: a deletion killed half way is finished by the
        next one. The lake's history before the deletion is gone (no time travel to before it)."""
        with self.connect() as conn:
            deleted = self._retrying(lambda: _transaction(
                conn, lambda: conn.execute(f"DELETE FROM feedback_events WHERE {where}", params).fetchall()[0][0],
                "UPDATE ingest_turn SET turn = turn + 1"))  # an ingest beside it commits after, or again
            if on_deleted is not None:
                on_deleted(int(deleted))
            for sql in ("CALL ducklake_flush_inlined_data('lake')",
                        "CALL ducklake_expire_snapshots('lake', older_than => now())",
                        "CALL ducklake_rewrite_data_files('lake', 'feedback_events', delete_threshold => 0)",
                        "CALL ducklake_expire_snapshots('lake', older_than => now())",
                        "CALL ducklake_cleanup_old_files('lake', cleanup_all => true)",
                        # files a killed writer left (a writer at work now has younger ones)
                        "CALL ducklake_delete_orphaned_files('lake', older_than => now() - INTERVAL 1 HOUR)"):
                self._retrying(lambda sql=sql: conn.execute(sql).fetchall())
        self._vacuum_catalog()
        return int(deleted)

    def _vacuum_catalog(self) -> None:
        """Rewrite the SQLite catalog without its free pages (PostgreSQL's own VACUUM reclaims its dead rows)."""
        import sqlite3

        if self.catalog:
            return
        conn = sqlite3.connect(self.path, timeout=self.lock_timeout_seconds, isolation_level=None)
        try:
            conn.execute("VACUUM")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()

    def held(self, column: str, values: list[str]) -> set[str]:
        """Which of `values` some event still holds in `column` (a text column of feedback_events)."""
        import pyarrow as pa

        if column not in EVENT_COLUMNS or not values:
            return set()
        wanted = pa.table({"value": pa.array(sorted(set(values)), pa.string())})
        with self.connect(read_only=True) as conn:
            conn.register("wanted", wanted)
            rows = self._retrying(lambda: conn.execute(
                f"SELECT DISTINCT {column} FROM feedback_events SEMI JOIN wanted ON {column} = wanted.value"
            ).fetchall())
        return {r[0] for r in rows}

    def query(self, sql: str, params: list | None = None):
        """A polars frame of a read-only query."""
        with self.connect(read_only=True) as conn:
            return self._retrying(lambda: conn.sql(sql, params=params).pl() if params else conn.sql(sql).pl())

    def stream(self, sql: str | Iterable[str], chunk_rows: int = 250_000, memory_limit: str = "1GB"):
        """The rows of a read-only query as polars frames of at most `chunk_rows`, never all at once: DuckDB sorts
        within `memory_limit` and spills the rest to a temporary folder, so a history of any size streams. Several
        queries (an iterable, taken one at a time as the rows are read) give their rows in turn, in one DuckDB."""
        import polars as pl

        # a cursor of this process's streaming DuckDB: the memory limit is a database's, not a connection's
        with closing(self._lake(memory_limit).cursor()) as conn:
            self._retrying(lambda: conn.execute("USE lake"))
            for query in [sql] if isinstance(sql, str) else sql:
                for batch in conn.execute(query).fetch_record_batch(chunk_rows):
                    yield pl.from_arrow(batch)

    # where the lake is

    @property
    def data_path(self) -> str:
        if self.data_url:
            url = self.data_url.removeprefix("file://")
            return url if url.endswith("/") else url + "/"
        return str(Path(self.path).with_suffix("")) + "_files/"

    def attach_sql(self, read_only: bool = False) -> str:
        """The statements that open the lake in any DuckDB 1.5.5 (the CLI too): the extensions from their PyPI
        packages, by path, since INSTALL would download them; then ATTACH as `lake`. No secret is in them."""
        loads = [f"LOAD '{extension_file(name)}';" for name in self._extensions()]
        options = [f"DATA_PATH {_literal(self.data_path)}"] + (["READ_ONLY"] if read_only else [])
        if not self.data_url:  # the files beside the catalog move with it (a copied or moved RMI_HOME)
            options.append("OVERRIDE_DATA_PATH true")
        return "\n".join([*loads, f"ATTACH {_literal('ducklake:' + self._catalog)} AS lake ({', '.join(options)});",
                          "USE lake;"])

    def _lake(self, memory_limit: str | None = None):
        """This process's DuckDB with the lake attached (read-write: a reader's queries are ours), opened once per
        catalog, and anew when the catalog file is not the one it opened (a home made fresh) or in a forked child.
        Each `connect` is a cursor of it, which is how DuckDB shares a database between threads. With a
        `memory_limit`, the one `stream` reads through: read-only where the lake exists, sorting within the limit
        and spilling to a folder of this process's (opening it costs 0.2 s: once per process, not per query)."""
        key = (os.getpid(), self._catalog, self.data_path, self.s3_endpoint_url, memory_limit)
        with _LAKES_LOCK:
            held = _LAKES.get(key)
            if held is not None and held[1] == self._catalog_file():
                return held[0]
            if held is not None:
                held[0].close()
            lake = self._retrying(lambda: self._open(read_only=memory_limit is not None and self._exists()))
            if memory_limit is not None:
                lake.execute(f"SET memory_limit = {_literal(memory_limit)}; "
                             f"SET temp_directory = {_literal(_spill_folder())}")
            _LAKES[key] = (lake, self._catalog_file())
            return lake

    def _catalog_file(self) -> tuple[int, int] | None:
        """Which file the SQLite catalog is (None: PostgreSQL, or none yet)."""
        if self.catalog:
            return None
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        return stat.st_dev, stat.st_ino

    @property
    def _catalog(self) -> str:
        if self.catalog and "password" in self.catalog.lower():
            raise ValueError("RMI_WAREHOUSE_CATALOG holds a password: put it in PGPASSWORD (or ~/.pgpass), which "
                             "libpq reads, so that it never shows in settings, the UI or a log")
        return self.catalog or f"sqlite:{self.path}"

    def _extensions(self) -> list[str]:
        names = ["ducklake", "postgres_scanner" if self._catalog.startswith("postgres:") else "sqlite_scanner"]
        return names + (["httpfs"] if self.data_path.startswith(("s3://", "http://", "https://")) else [])

    def _exists(self) -> bool:
        return self.catalog is not None or Path(self.path).exists()

    def _open(self, read_only: bool):
        import duckdb

        if not self.catalog:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        if "://" not in self.data_path:
            Path(self.data_path).mkdir(parents=True, exist_ok=True)
        conn = duckdb.connect()
        try:
            if self.data_path.startswith("s3://"):
                _s3_secret(conn, self.s3_endpoint_url)
            try:
                conn.execute(self.attach_sql(read_only))
            except duckdb.Error as exc:
                if _retryable(exc):
                    raise
                if read_only and "creating a new DuckLake is explicitly disabled" in str(exc):
                    conn.close()  # a catalog database with no lake in it yet: a writer creates the empty one
                    return self._open(read_only=False)
                where = self.catalog.split(" password")[0] if self.catalog else self.path
                raise RuntimeError(f"cannot open the warehouse's catalog {where}: {str(exc).splitlines()[0]}") from None
            if not read_only:
                self._ensure_schema(conn)
            return conn
        except BaseException:
            conn.close()
            raise

    def _ensure_schema(self, conn) -> None:
        """Run SCHEMA and recompute the keys after a hash change, in one transaction; only when something is out of
        date, so that writers side by side do not conflict over it."""
        probe = conn.execute(f"SELECT ({KEY})::VARCHAR FROM (SELECT 'rmi-event-id' AS event_id)").fetchall()[0][0]
        tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake'"
                                             ).fetchall()}
        info = dict(conn.execute("SELECT key, value FROM warehouse_info").fetchall()) if "warehouse_info" in tables \
            else {}
        if info.get("schema") == SCHEMA_VERSION and info.get("id_key_probe") == probe:
            return

        def changes() -> None:
            conn.execute(SCHEMA)
            if info.get("id_key_probe") != probe:  # DuckDB's hash may change between versions
                conn.execute(f"UPDATE feedback_events SET id_key = {KEY}")
            conn.execute("DELETE FROM warehouse_info WHERE key IN ('schema', 'id_key_probe')")
            conn.execute("INSERT INTO warehouse_info VALUES ('schema', ?), ('id_key_probe', ?)",
                         [SCHEMA_VERSION, probe])

        _transaction(conn, changes)

    def _retrying(self, fn):
        """fn(), again after a commit that lost to another writer's or a catalog that was locked, with jittered
        backoff, for up to lock_timeout_seconds."""
        import duckdb
        from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

        try:
            for attempt in Retrying(retry=retry_if_exception(_retryable), reraise=True,
                                    stop=stop_after_delay(self.lock_timeout_seconds),
                                    wait=wait_random_exponential(multiplier=0.05, max=2.0)):
                with attempt:
                    return fn()
        except duckdb.Error as exc:
            if not _retryable(exc):
                raise
            raise TimeoutError(f"the warehouse's commits kept conflicting with other writers' for more than "
                               f"{self.lock_timeout_seconds:.0f} s (RMI_WAREHOUSE_LOCK_TIMEOUT_SECONDS): "
                               f"{str(exc).splitlines()[0]}") from None


def extension_file(name: str) -> str:
    """The file of a DuckDB extension from its PyPI package (duckdb-extension-<name>), built for this DuckDB."""
    import importlib.resources

    import duckdb

    package = f"duckdb-extension-{name.replace('_', '-')}"
    try:
        root = importlib.resources.files(f"duckdb_extension_{name}")
    except ModuleNotFoundError:
        raise RuntimeError(f"the DuckDB extension {name} is not installed: pip install -c constraints.txt "
                           f"'{package}=={duckdb.__version__}'") from None
    path = root / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.is_file():
        raise RuntimeError(f"{package} is not built for DuckDB {duckdb.__version__}: install the same version")
    return str(path)


def _transaction(conn, work, *also: str):
    """work() and the statements `also` in one transaction, rolled back if any part fails."""
    conn.execute("BEGIN")
    try:
        result = work()
        for sql in also:
            conn.execute(sql)
        conn.execute("COMMIT")  # a commit that fails has rolled back already
        return result
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - nothing left to roll back
            pass
        raise


def _retryable(exc: BaseException) -> bool:
    import duckdb

    return isinstance(exc, duckdb.Error) and any(s in str(exc).lower() for s in RETRYABLE)


def _spill_folder() -> str:
    """Where this process's streaming DuckDB spills what does not fit its memory limit; removed when it exits."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="rmi-spill-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _s3_secret(conn, endpoint_url: str | None) -> None:
    """DuckDB's S3 credentials from the same AWS_* variables s3fs reads (never from settings or Dagster config)."""
    from urllib.parse import urlsplit

    import duckdb

    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not (key and secret):
        raise RuntimeError("the warehouse's data files are on s3:// and DuckDB reads S3 credentials from "
                           "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN): set them")
    options = {"KEY_ID": key, "SECRET": secret,
               "REGION": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"}
    if os.environ.get("AWS_SESSION_TOKEN"):
        options["SESSION_TOKEN"] = os.environ["AWS_SESSION_TOKEN"]
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlsplit(endpoint)
        options |= {"ENDPOINT": parts.netloc, "USE_SSL": str(parts.scheme == "https").lower(), "URL_STYLE": "path"}
    conn.execute(f"LOAD '{extension_file('httpfs')}'")
    sql = ", ".join(f"{k} {v if v in ('true', 'false') else _literal(v)}" for k, v in options.items())
    try:
        conn.execute(f"CREATE SECRET rmi_warehouse_s3 (TYPE s3, {sql})")
    except duckdb.Error:
        raise RuntimeError("DuckDB refused the S3 credentials from AWS_* for the warehouse") from None


if __name__ == "__main__":  # `duckdb -cmd "$(python -m rmi_pipeline.resources.warehouse)"`: the lake in the CLI
    print(Warehouse.from_settings(Settings()).attach_sql(read_only=True))
