"""The production profile runs a cycle: Dagster on PostgreSQL (deploy/dagster.yaml, local runs instead of
Kubernetes Jobs), MLflow as a tracking server on PostgreSQL with its artifacts on S3, the loop's feedback,
datasets and evals on S3, and the warehouse a DuckLake table, its catalog in PostgreSQL and its Parquet on S3.
Every server is real and local: Debian's PostgreSQL, moto's S3, `mlflow server`."""

import json
import os
from pathlib import Path

import pytest
import yaml
from local_servers import mlflow_server, postgres_bin, postgres_server, s3_server

from rmi_pipeline.cli.main import main

DEPLOY_YAML = Path(__file__).resolve().parent.parent / "deploy" / "dagster.yaml"
BUCKETS = ("rmi-store", "rmi-evals", "rmi-mlflow", "rmi-dagster-logs")

pytestmark = pytest.mark.skipif(
    postgres_bin() is None,
    reason="Debian's PostgreSQL server is not installed (/usr/lib/postgresql/*/bin/postgres); `make test` "
           "installs it when run as root, otherwise `apt-get install postgresql`")


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    """`rmi run --cycles 1 --fresh` on the production profile; the servers stay up for the assertions."""
    import boto3

    tmp = tmp_path_factory.mktemp("prod")
    with postgres_server(["dagster", "mlflow", "lake"]) as pg, s3_server() as s3, pytest.MonkeyPatch.context() as mp:
        aws = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL_S3": s3}  # botocore's own variable: s3fs, MLflow and Dagster's S3 all honour it
        for key, value in aws.items():
            mp.setenv(key, value)
        client = boto3.client("s3")
        for bucket in BUCKETS:
            client.create_bucket(Bucket=bucket)
        server_env = {**aws, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no GenAI job workers: 2 GB less
        with mlflow_server(pg["url"]["mlflow"], f"s3://{BUCKETS[2]}/artifacts", tmp / "mlflow.log",
                           server_env) as tracking:
            instance_yaml = yaml.safe_load(DEPLOY_YAML.read_text())
            del instance_yaml["run_launcher"]  # runs execute here, not as Kubernetes Jobs
            (tmp / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml))
            from conftest import FAST

            home = tmp / "home"
            # what is under test is where state lives, not how well the model learns (test_loop.py): short
            # trainings and a first model that is always promoted keep this a minute or two on shared cores; a
            # challenger the gate passes is promoted at once (no canary trial, whose runs would depend on the verdict);
            # 300 questions and 10 eval items a slice still write feedback, a dataset and a suite to S3; the mix's
            # sources that compute (practice, RL, self-labels) are off: they write through the same object store
            short = {"RMI_TRAIN_BOOTSTRAP_STEPS": "60", "RMI_TRAIN_STEPS": "60", "RMI_GATE_FIRST_FLOOR": "0",
                     "RMI_SIM_QUERIES_PER_CYCLE": "300", "RMI_PROMOTION": "offline",
                     "RMI_EVAL_ITEMS_PER_SLICE": "10", "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE": "10",
                     "RMI_MIX": '{"practice": 0, "rl": 0, "hint_distill": 0, "self_label": 0}'}
            env = {**FAST, **short, "RMI_HOME": str(home), "RMI_DAGSTER_YAML": str(tmp / "dagster.yaml"),
                   "RMI_MLFLOW_TRACKING_URI": tracking, "RMI_STORAGE_URL": f"s3://{BUCKETS[0]}/loop",
                   "RMI_EVAL_URL": f"s3://{BUCKETS[1]}/sealed",
                   "DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(pg["port"]), "DAGSTER_PG_USER": pg["user"],
                   "DAGSTER_PG_PASSWORD": pg["password"], "DAGSTER_PG_DB": "dagster",
                   "DAGSTER_COMPUTE_LOGS_BUCKET": BUCKETS[3],
                   "RMI_WAREHOUSE_CATALOG": f"postgres:dbname=lake host=127.0.0.1 port={pg['port']} user={pg['user']}",
                   "PGPASSWORD": pg["password"], "RMI_WAREHOUSE_DATA_URL": f"s3://{BUCKETS[0]}/warehouse/"}
            for key, value in env.items():
                mp.setenv(key, value)
            code = main(["run", "--cycles", "1", "--fresh"])
            summary = json.loads((home / "run_summary.json").read_text())
            yield {"exit_code": code, "summary": summary, "home": home, "pg": pg, "tracking": tracking, "s3": client}
    os.environ.pop("DAGSTER_HOME", None)  # main() exported it for its own runs


def test_a_cycle_on_the_production_profile_promotes_a_champion_in_mlflow_on_postgres(production):
    from mlflow import MlflowClient

    assert production["exit_code"] == 0
    first, second = production["summary"]
    # through the tracking server's REST API MLflow reports versions as strings; sqlite gives ints
    assert first["verdict"] == "promote" and int(first["champion_version"]) == 1
    assert int(second["challenger_version"]) == 2 and second["ingest"]["ingested"] > 0
    # the registry the tracking server serves agrees with the loop's report
    champion = MlflowClient(production["tracking"]).get_model_version_by_alias("rmi-arithmetic", "champion")
    assert int(champion.version) == int(second["champion_version"])
    # ... and lives in PostgreSQL, not in a sqlite file under RMI_HOME
    with production["pg"]["connect"]("mlflow") as conn, conn.cursor() as cur:
        cur.execute("SELECT version FROM registered_model_aliases WHERE name = %s AND alias = 'champion'",
                    ("rmi-arithmetic",))
        assert cur.fetchall() == [(int(champion.version),)]
    assert not (production["home"] / "mlflow.db").exists()
    # its checkpoint went through the tracking server to S3, not to the local disk
    keys = [o["Key"] for o in production["s3"].list_objects_v2(Bucket=BUCKETS[2]).get("Contents", [])]
    assert sum(k.endswith("model/data/checkpoint/checkpoint.pt") for k in keys) == 2  # MLflow models, on S3
    assert not (production["home"] / "mlartifacts").exists()


def test_dagster_keeps_the_cycle_runs_in_postgres(production):
    with production["pg"]["connect"]("dagster") as conn, conn.cursor() as cur:
        cur.execute("SELECT pipeline_name, status, count(*) FROM runs GROUP BY 1, 2 ORDER BY 1")
        runs = cur.fetchall()
        cur.execute("SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'")
        materializations = cur.fetchone()[0]
    assert runs == [("health_check", "SUCCESS", 2), ("improvement_cycle", "SUCCESS", 2),
                    ("ingest_feedback", "SUCCESS", 1)]  # rmi run checks the champion's health after each cycle
    assert materializations >= 2 + 2 * 4  # the batch's two assets, four per cycle at least
    assert not list((production["home"] / "dagster").rglob("*.db"))  # no sqlite storage beside it


def test_feedback_datasets_and_evals_live_on_s3(production):
    s3 = production["s3"]

    def keys(bucket: str, prefix: str) -> list[str]:
        return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]

    assert len(keys(BUCKETS[0], "loop/feedback/incoming/")) == 1
    assert any(k.endswith("train.parquet") for k in keys(BUCKETS[0], "loop/datasets/"))
    assert keys(BUCKETS[1], "sealed/anchor/suite.json") and not keys(BUCKETS[0], "loop/anchor/")
    assert not (production["home"] / "store").exists() and not (production["home"] / "evals").exists()


def test_the_warehouse_is_a_lakehouse_table_in_postgresql_and_s3(production):
    """Every run pod reaches it without a shared volume: the catalog in PostgreSQL, the rows in Parquet on S3."""
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.settings import Settings

    with production["pg"]["connect"]("lake") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM ducklake_data_file")
        files = cur.fetchone()[0]
        cur.execute("SELECT value FROM ducklake_metadata WHERE key = 'data_path'")
        data_path = cur.fetchone()[0]
    keys = [o["Key"] for o in production["s3"].list_objects_v2(Bucket=BUCKETS[0], Prefix="warehouse/")
            .get("Contents", [])]
    assert data_path == f"s3://{BUCKETS[0]}/warehouse/"
    assert files and sum(k.endswith(".parquet") for k in keys) >= files
    ingested = sum(r["ingest"].get("ingested", 0) for r in production["summary"])
    warehouse = build_resources(Settings())["warehouse"]
    assert warehouse.query("SELECT count(*) AS n FROM feedback_events")["n"][0] == ingested > 0
    assert not list(production["home"].glob("warehouse*"))  # nothing of it under RMI_HOME
