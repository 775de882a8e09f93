"""Several ingest processes commit to the lakehouse warehouse at once, with batches that overlap: every event is
stored exactly once, each batch's counts add up, and no writer sees a lock error. Real processes, a real catalog
(a SQLite file, or PostgreSQL with the Parquet files on a local S3 server)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from local_servers import postgres_bin, postgres_server, s3_server
from warehouse_writer import BATCHES, batch_ids

from rmi_pipeline.resources.warehouse import Warehouse

WRITERS = 4
HERE = Path(__file__).resolve().parent


def run_writers(tmp_path: Path, warehouse: dict, env: dict | None = None) -> list[list[dict]]:
    """WRITERS processes started together at one start line; each one's per-batch counts."""
    start = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, str(HERE / "warehouse_writer.py"),
                               json.dumps({"warehouse": warehouse, "writer": w, "start": str(start)})],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **(env or {})}) for w in range(WRITERS)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < WRITERS:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            [p.communicate()[1][-2000:] for p in procs if p.poll() is not None]
        time.sleep(0.05)
    start.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-3000:]
        assert "lock" not in err.lower(), err[-3000:]
    return [json.loads(out) for out, _ in outs]


def assert_exactly_once(warehouse: Warehouse, counts: list[list[dict]]) -> None:
    expected = {i for w in range(WRITERS) for b in range(BATCHES) for i in batch_ids(w, b)}
    stored = warehouse.query("SELECT count(*) AS n, count(DISTINCT event_id) AS ids FROM feedback_events").row(0)
    assert stored == (len(expected), len(expected))
    assert set(warehouse.query("SELECT event_id FROM feedback_events")["event_id"]) == expected
    batches = [c for writer in counts for c in writer]
    assert all(c["ingested"] + c["duplicates"] == c["rows"] for c in batches)
    assert sum(c["ingested"] for c in batches) == len(expected)  # no event counted as ingested twice
    assert warehouse.query("SELECT count(*) AS n FROM feedback_quality")["n"][0] > 0  # the views read it


def test_four_writers_at_once_on_the_local_catalog_store_every_event_exactly_once(tmp_path):
    config = {"path": str(tmp_path / "warehouse.sqlite")}
    Warehouse(**config).migrate()  # the lake exists: what is under test is the writers' commits, not its creation
    assert_exactly_once(Warehouse(**config), run_writers(tmp_path, config))


@pytest.mark.skipif(postgres_bin() is None, reason="Debian's PostgreSQL server is not installed "
                    "(/usr/lib/postgresql/*/bin/postgres); `apt-get install postgresql`")
def test_four_writers_at_once_on_postgresql_and_s3_store_every_event_exactly_once(tmp_path, monkeypatch):
    import boto3

    with postgres_server(["lake"]) as pg, s3_server() as s3:
        env = {"PGPASSWORD": pg["password"], "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        boto3.client("s3", endpoint_url=s3).create_bucket(Bucket="lake")
        config = {"path": str(tmp_path / "unused.sqlite"), "s3_endpoint_url": s3, "data_url": "s3://lake/events/",
                  "catalog": f"postgres:dbname=lake host=127.0.0.1 port={pg['port']} user={pg['user']}"}
        Warehouse(**config).migrate()  # the first start, alone: it creates the catalog's tables
        counts = run_writers(tmp_path, config, env)
        assert_exactly_once(Warehouse(**config), counts)
        # the catalog is in PostgreSQL and the rows in Parquet on S3: nothing of the warehouse on this disk
        with pg["connect"]("lake") as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM ducklake_data_file")
            files = cur.fetchone()[0]
        keys = [o["Key"] for o in boto3.client("s3", endpoint_url=s3).list_objects_v2(Bucket="lake")
                .get("Contents", [])]
        assert files > 0 and sum(k.endswith(".parquet") for k in keys) >= files
        assert not (tmp_path / "unused.sqlite").exists()
