"""The warehouse as a lakehouse table: DuckLake (the one the loop uses) against Apache Iceberg (pyiceberg with a SQL
catalog), each against a plain DuckDB file, on the same synthetic feedback events, in one run.

    python bench/lakehouse.py                          1M-event batches, 4 writers
    python bench/lakehouse.py --events 200000 --reps 1     a quicker run

Iceberg needs `pip install -c constraints.txt 'pyiceberg[sql-sqlite,pyarrow]==0.12.0'` (not a dependency of the
project); without it only DuckLake is measured. Per store (a fresh folder each time, catalogs in SQLite files):
  append          one batch into an empty table, no dedupe
  dedupe append   a second batch whose ids are 10% already stored: only the new events are stored
  4 writers       4 processes at once, each a quarter of a batch with 10% of its ids shared by all: wall time,
                  then rows stored against distinct ids (exactly once means equal)
Ratios are the DuckDB file's seconds over the store's (the house convention: 0.5x is half as fast).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import synth  # noqa: E402  the ingest bench's event generator

WRITERS, OVERLAP = 4, 0.1
STORES = ("duckdb file", "ducklake", "iceberg")


def events(n: int, seed: int, shared: int = 0) -> pl.DataFrame:
    """Validated events (the warehouse's columns); the first `shared` ids are the same in every seed."""
    from rmi_pipeline.schema import EVENT_COLUMNS

    raw = synth(n, seed, bad=0.0, repeated=0.0)
    ids = pl.Series([f"shared-{i}" for i in range(shared)] + raw["event_id"][shared:].to_list())
    return raw.with_columns(
        event_id=ids, ts=pl.col("ts").str.to_datetime("%Y-%m-%dT%H:%M:%SZ", time_zone="UTC"),
        schema_version=pl.col("schema_version").cast(pl.Int32), meta=pl.col("meta").struct.json_encode(),
        batch_id=pl.lit(f"bench-{seed}"), tier=pl.lit(None, dtype=pl.Int32)).select(list(EVENT_COLUMNS))


def second_batch(first: pl.DataFrame, seed: int) -> pl.DataFrame:
    """A batch of as many events, OVERLAP of them already in `first`."""
    again = int(len(first) * OVERLAP)
    return pl.concat([first.head(again), events(len(first) - again, seed)])


class DuckDBFile:
    """The warehouse as it was: one DuckDB file, one writer at a time, dedupe by an id hash then the full id."""

    def __init__(self, root: Path):
        self.path = str(root / "warehouse.duckdb")

    def _conn(self):
        import duckdb

        while True:  # one writing process at a time: the others wait for the file
            try:
                return duckdb.connect(self.path)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise
                time.sleep(0.02)

    def append(self, frame: pl.DataFrame) -> None:
        with self._conn() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS feedback_events AS SELECT *, hash(event_id) AS id_key "
                         "FROM frame LIMIT 0")
            conn.execute("INSERT INTO feedback_events SELECT *, hash(event_id) FROM frame")

    def dedupe_append(self, frame: pl.DataFrame) -> None:
        with self._conn() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS feedback_events AS SELECT *, hash(event_id) AS id_key "
                         "FROM frame LIMIT 0")
            conn.execute("INSERT INTO feedback_events WITH batch AS (SELECT *, hash(event_id) AS id_key FROM frame), "
                         "seen AS (SELECT event_id FROM feedback_events SEMI JOIN batch USING (id_key)) "
                         "SELECT * FROM batch ANTI JOIN seen USING (event_id)")

    def counts(self) -> tuple[int, int]:
        with self._conn() as conn:
            return conn.execute("SELECT count(*), count(DISTINCT event_id) FROM feedback_events").fetchone()


class DuckLake:
    """The loop's own warehouse resource: a SQLite catalog, Parquet files beside it."""

    def __init__(self, root: Path):
        from rmi_pipeline.resources.warehouse import Warehouse

        self.warehouse = Warehouse(path=str(root / "warehouse.sqlite"))

    def append(self, frame: pl.DataFrame) -> None:
        with self.warehouse.connect() as conn:
            conn.execute("INSERT INTO feedback_events BY NAME SELECT *, hash(event_id) AS id_key, "
                         "current_timestamp AS ingested_at FROM frame")

    def dedupe_append(self, frame: pl.DataFrame) -> None:
        self.warehouse.ingest(frame)

    def counts(self) -> tuple[int, int]:
        return self.warehouse.query("SELECT count(*) AS n, count(DISTINCT event_id) AS d FROM feedback_events").row(0)


class Iceberg:
    """pyiceberg with a SQL catalog (SQLite) and a local warehouse folder; dedupe reads the stored ids, then appends
    the rest. pyiceberg's own retry of a commit that lost to another writer's re-applies the same rows on the new
    snapshot (measured: duplicates), so it is off, and the whole dedupe append is redone on the refreshed table."""

    def __init__(self, root: Path):
        from pyiceberg.catalog.sql import SqlCatalog

        self.catalog = SqlCatalog("bench", uri=f"sqlite:///{root / 'iceberg.sqlite'}",
                                  warehouse=f"file://{root / 'iceberg'}")
        self.catalog.create_namespace_if_not_exists("rmi")

    def _table(self, frame: pl.DataFrame):
        from pyiceberg.exceptions import TableAlreadyExistsError

        try:
            return self.catalog.create_table("rmi.feedback_events", schema=frame.to_arrow().schema,
                                             properties={"commit.retry.num-retries": "0"})
        except TableAlreadyExistsError:
            return self.catalog.load_table("rmi.feedback_events")

    def append(self, frame: pl.DataFrame) -> None:
        self._table(frame).append(frame.to_arrow())

    def dedupe_append(self, frame: pl.DataFrame) -> None:
        from pyiceberg.exceptions import CommitFailedException

        table = self._table(frame)
        while True:
            seen = pl.from_arrow(table.scan(selected_fields=("event_id",)).to_arrow())
            new = frame.join(seen, on="event_id", how="anti") if len(seen) else frame
            try:
                table.append(new.to_arrow())
                return
            except CommitFailedException:
                time.sleep(random.uniform(0.01, 0.1))
                table = self.catalog.load_table("rmi.feedback_events")

    def counts(self) -> tuple[int, int]:
        ids = pl.from_arrow(self.catalog.load_table("rmi.feedback_events").scan(selected_fields=("event_id",))
                            .to_arrow())["event_id"]
        return len(ids), ids.n_unique()


KINDS = {"duckdb file": DuckDBFile, "ducklake": DuckLake, "iceberg": Iceberg}


def writer(store: str, root: Path, index: int, n: int) -> None:
    """One of the concurrent writers (a subprocess): builds its batch, waits for the start line, commits."""
    kind = KINDS[store](root)
    frame = events(n, seed=100 + index, shared=int(n * OVERLAP))
    (root / f"ready-{index}").touch()
    while not (root / "go").exists():
        time.sleep(0.002)
    kind.dedupe_append(frame)


def writers(store: str, root: Path, n: int) -> tuple[float, tuple[int, int]]:
    kind = KINDS[store](root)
    kind.dedupe_append(events(10, seed=99))  # the table exists: what is timed is the writers' commits
    procs = [subprocess.Popen([sys.executable, __file__, "--writer", json.dumps([store, str(root), i, n // WRITERS])])
             for i in range(WRITERS)]
    while len(list(root.glob("ready-*"))) < WRITERS:
        if any(p.poll() not in (None, 0) for p in procs):
            raise RuntimeError(f"a {store} writer failed")
        time.sleep(0.02)
    start = time.perf_counter()
    (root / "go").touch()
    if any(p.wait() for p in procs):
        raise RuntimeError(f"a {store} writer failed")
    return time.perf_counter() - start, kind.counts()


def timed(store: str, n: int, reps: int, first: pl.DataFrame, second: pl.DataFrame) -> dict:
    result = {"append": [], "dedupe append": []}
    for _ in range(reps):
        root = Path(tempfile.mkdtemp(prefix="rmi-lake-"))
        try:
            kind = KINDS[store](root)
            start = time.perf_counter()
            kind.append(first)
            result["append"].append(time.perf_counter() - start)
            start = time.perf_counter()
            kind.dedupe_append(second)
            result["dedupe append"].append(time.perf_counter() - start)
            stored = kind.counts()
            assert stored[0] == stored[1] == len(first) + len(second) - int(len(first) * OVERLAP), (store, stored)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    out = {k: statistics.median(v) for k, v in result.items()}
    root = Path(tempfile.mkdtemp(prefix="rmi-lake-"))
    try:
        out["4 writers"], out["stored"] = writers(store, root, n)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--writer", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        store, root, index, n = json.loads(args.writer)
        return writer(store, Path(root), index, n)
    try:
        import pyiceberg  # noqa: F401
        stores = STORES
    except ImportError:
        print("pyiceberg is not installed: measuring DuckLake only")
        stores = STORES[:2]
    first = events(args.events, seed=1)
    second = second_batch(first, seed=2)
    results = {store: timed(store, args.events, args.reps, first, second) for store in stores}
    base = results["duckdb file"]
    print(f"{args.events:,} events a batch, medians of {args.reps}; 4 writers: {args.events // WRITERS:,} each, "
          f"{OVERLAP:.0%} of ids shared")
    print(f"{'store':<12} {'append':>16} {'dedupe append':>16} {'4 writers':>16}   stored / distinct")
    for store, r in results.items():
        cells = [f"{r[k]:6.2f} s {base[k] / r[k]:5.2f}x" for k in ("append", "dedupe append", "4 writers")]
        print(f"{store:<12} " + " ".join(f"{c:>16}" for c in cells) + f"   {r['stored'][0]:,} / {r['stored'][1]:,}")


if __name__ == "__main__":
    main()
