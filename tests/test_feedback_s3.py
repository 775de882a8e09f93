"""Feedback intake on S3: the real sensor and assets against a local S3 server (moto), credentials from AWS_*."""

import gzip
import io
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import polars as pl
import pytest
from dagster import SkipReason, instance_for_test
from feedback_intake import Intake, event

from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.settings import Settings

BUCKET = "team-feedback"
SECRET = "s3cr3t-that-must-never-be-logged"


@pytest.fixture(scope="module")
def s3_endpoint():
    """moto's S3 server on a free loopback port, as a subprocess stopped by its own pid."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.1)
    yield url
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@pytest.fixture
def s3_intake(rmi_env, s3_endpoint, monkeypatch):
    """An Intake whose object store is s3://BUCKET/<this test's prefix>, endpoint from RMI_STORAGE_S3_ENDPOINT_URL."""
    import fsspec

    prefix = f"team-{uuid.uuid4().hex[:8]}"  # one server for the module: each test has its own prefix
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("RMI_STORAGE_URL", f"s3://{BUCKET}/{prefix}")
    monkeypatch.setenv("RMI_STORAGE_S3_ENDPOINT_URL", s3_endpoint)
    fs = fsspec.filesystem("s3", endpoint_url=s3_endpoint)
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    resources = build_resources(Settings())
    with instance_for_test() as instance:
        yield Intake(resources, instance), fs, f"{BUCKET}/{prefix}"


def parquet_bytes(lines: list[str]) -> bytes:
    import json

    buf = io.BytesIO()
    pl.DataFrame([{**json.loads(line), "meta": None} for line in lines]).write_parquet(buf)
    return buf.getvalue()


def test_batches_landed_on_s3_as_jsonl_gzip_and_parquet_are_ingested_with_counts_that_add_up(s3_intake):
    intake, fs, root = s3_intake
    intake.land("day1.jsonl", "\n".join([event(i) for i in range(10)] + ["{broken", event(0)]).encode())
    intake.land("day2.jsonl.gz", gzip.compress("\n".join(event(i) for i in range(5, 15)).encode()))
    intake.land("day3.parquet", parquet_bytes([event(i) for i in range(15, 20)]))
    intake.land("readme.txt", b"not a batch")
    assert fs.exists(f"{root}/{layout.incoming('day1.jsonl')}")  # really on S3, under the prefix

    result = intake.tick()
    assert sorted(r.partition_key for r in result.run_requests) == ["day1.jsonl", "day2.jsonl.gz", "day3.parquet"]
    counts = {}
    for name in ("day1.jsonl", "day2.jsonl.gz", "day3.parquet"):
        run, meta = intake.ingest(name)
        assert run.success, name
        counts[name] = {k: meta["feedback_events"][k] for k in ("rows_in", "ingested", "duplicates", "quarantined")}
        # no credential in anything the run recorded
        assert not any(SECRET in str(e) for e in run.all_events)
    assert counts == {
        "day1.jsonl": {"rows_in": 12, "ingested": 10, "duplicates": 1, "quarantined": 1},
        "day2.jsonl.gz": {"rows_in": 10, "ingested": 5, "duplicates": 5, "quarantined": 0},  # 5..9 came on day 1
        "day3.parquet": {"rows_in": 5, "ingested": 5, "duplicates": 0, "quarantined": 0},
    }
    assert intake.warehouse_count() == 20
    assert [q["reason"][:14] for q in intake.quarantined("day1.jsonl")] == ["malformed JSON"]
    assert fs.exists(f"{root}/{layout.validated('day3.parquet')}")
    assert isinstance(intake.tick(), SkipReason)  # nothing new now


def test_a_file_put_by_another_client_is_seen_on_the_next_tick(s3_intake, s3_endpoint):
    """The service that writes feedback is another process: a listing cached by s3fs must not hide its files."""
    import boto3

    intake, _, root = s3_intake
    intake.land("first.jsonl", event(1).encode())
    assert [r.partition_key for r in intake.tick().run_requests] == ["first.jsonl"]
    assert intake.ingest("first.jsonl")[0].success  # landed: never asked for again
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    prefix = root.split("/", 1)[1]
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{layout.incoming('second.jsonl')}", Body=event(2).encode())
    assert [r.partition_key for r in intake.tick().run_requests] == ["second.jsonl"]
    run, meta = intake.ingest("second.jsonl")
    assert run.success and meta["feedback_events"]["ingested"] == 1


def test_the_endpoint_can_come_from_the_standard_aws_variable(s3_endpoint, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    monkeypatch.delenv("RMI_STORAGE_S3_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("RMI_HOME", str(tmp_path))
    monkeypatch.setenv("RMI_STORAGE_URL", f"s3://{BUCKET}/by-env")
    storage = build_resources(Settings())["storage"]
    storage.write_bytes("feedback/incoming/x.jsonl", b"{}")
    assert storage.list("feedback/incoming") == ["feedback/incoming/x.jsonl"]
    assert storage.list("nothing/here") == []
