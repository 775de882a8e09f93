"""deploy/dagster.yaml stays loadable by the installed Dagster: every part validates against its class's config
schema, takes its values from the environment, and the Kubernetes Job it would launch can be built."""

import importlib
import shutil
from pathlib import Path

import pytest
from dagster._config import process_config, resolve_to_config_type
from dagster._core.instance.ref import InstanceRef

DEPLOY_YAML = Path(__file__).resolve().parent.parent / "deploy" / "dagster.yaml"
ENV = {"DAGSTER_PG_HOST": "db.internal", "DAGSTER_PG_PORT": "6543", "DAGSTER_PG_USER": "dagster",
       "DAGSTER_PG_PASSWORD": "not-in-the-file", "DAGSTER_PG_DB": "dagster", "DAGSTER_K8S_NAMESPACE": "rmi",
       "DAGSTER_COMPUTE_LOGS_BUCKET": "rmi-dagster-logs"}
PARTS = ("storage_data", "run_launcher_data", "run_coordinator_data", "compute_logs_data", "scheduler_data")


def resolved(ref: InstanceRef, part: str) -> tuple[str, dict]:
    """(class name, config with env vars resolved) of one part of the instance, validated by its class."""
    data = getattr(ref, part)
    klass = getattr(importlib.import_module(data.module_name), data.class_name)
    result = process_config(resolve_to_config_type(klass.config_type()), data.config_dict)
    assert result.success, f"{part}: {[e.message for e in result.errors]}"
    return data.class_name, result.value


@pytest.fixture
def instance_ref(tmp_path, monkeypatch):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    shutil.copy(DEPLOY_YAML, tmp_path / "dagster.yaml")
    return InstanceRef.from_dir(str(tmp_path))


def test_the_production_instance_is_postgres_kubernetes_and_s3_from_the_environment(instance_ref):
    parts = {part: resolved(instance_ref, part) for part in PARTS}
    assert {part: name for part, (name, _) in parts.items()} == {
        "storage_data": "DagsterPostgresStorage", "run_launcher_data": "K8sRunLauncher",
        "run_coordinator_data": "QueuedRunCoordinator", "compute_logs_data": "S3ComputeLogManager",
        "scheduler_data": "DagsterDaemonScheduler"}
    db = parts["storage_data"][1]["postgres_db"]
    assert (db["hostname"], db["port"], db["password"]) == ("db.internal", 6543, "not-in-the-file")
    assert parts["run_launcher_data"][1]["job_namespace"] == "rmi"
    assert parts["compute_logs_data"][1]["bucket"] == "rmi-dagster-logs"
    assert "not-in-the-file" not in DEPLOY_YAML.read_text()
    assert instance_ref.settings["concurrency"]["runs"]["max_concurrent_runs"] == 4  # ingests side by side
    assert instance_ref.settings["telemetry"]["enabled"] is False


def test_the_kubernetes_job_for_a_run_can_be_built_from_it(instance_ref):
    """dagster-k8s checks volumes, mounts and pod config against the Kubernetes models when it builds a Job."""
    from dagster_k8s.job import DagsterK8sJobConfig, UserDefinedDagsterK8sConfig, construct_dagster_k8s_job

    _, config = resolved(instance_ref, "run_launcher_data")
    fields = {k: v for k, v in config.items() if k in DagsterK8sJobConfig._fields and k != "job_image"}
    job = construct_dagster_k8s_job(
        DagsterK8sJobConfig(job_image="registry.example/rmi-pipeline:1", **fields),
        args=["dagster", "api", "execute_run"], job_name="rmi-run-check",
        user_defined_k8s_config=UserDefinedDagsterK8sConfig.from_dict(config["run_k8s_config"]))
    pod = job.spec.template.spec
    container = pod.containers[0]
    assert {v.name: v.persistent_volume_claim.claim_name for v in pod.volumes} == {"rmi-home": "rmi-home"}
    assert [(m.name, m.mount_path) for m in container.volume_mounts] == [("rmi-home", "/var/lib/rmi")]
    assert [e.config_map_ref.name for e in container.env_from if e.config_map_ref] == ["rmi-settings"]
    assert [e.secret_ref.name for e in container.env_from if e.secret_ref] == ["rmi-secrets"]
    assert container.resources.requests == {"cpu": "2", "memory": "8Gi"}
    assert job.spec.ttl_seconds_after_finished == 86400


def test_a_missing_variable_is_an_error_not_a_silent_default(instance_ref, monkeypatch):
    monkeypatch.delenv("DAGSTER_PG_PASSWORD")
    data = instance_ref.storage_data
    klass = getattr(importlib.import_module(data.module_name), data.class_name)
    result = process_config(resolve_to_config_type(klass.config_type()), data.config_dict)
    assert not result.success and "DAGSTER_PG_PASSWORD" in str([e.message for e in result.errors])


def test_rmi_uses_the_instance_file_named_by_RMI_DAGSTER_YAML_with_its_variables_unresolved(rmi_env, monkeypatch):
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.settings import Settings

    monkeypatch.setenv("RMI_DAGSTER_YAML", str(DEPLOY_YAML))
    prepare_home(Settings())
    assert (rmi_env.dagster_home / "dagster.yaml").read_text() == DEPLOY_YAML.read_text()


def test_a_missing_instance_file_is_a_clear_error_that_leaves_the_home_alone(rmi_env, monkeypatch, capsys):
    from rmi_pipeline.cli.main import main

    (rmi_env.resolved_home / "store").mkdir(parents=True)
    monkeypatch.setenv("RMI_DAGSTER_YAML", str(rmi_env.resolved_home / "nope.yaml"))
    assert main(["run", "--fresh"]) == 2
    assert "RMI_DAGSTER_YAML" in capsys.readouterr().err
    assert (rmi_env.resolved_home / "store").is_dir()  # --fresh did not wipe anything first
