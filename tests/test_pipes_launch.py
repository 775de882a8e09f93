"""How a candidate's training is launched: the training program under Dagster Pipes, here or in a Kubernetes pod."""

import re
import subprocess
import sys
import types
from pathlib import Path

from dagster import PipesSubprocessClient

from rmi_pipeline.resources.training_launcher import WarmSubprocessClient, build_training_launcher
from rmi_pipeline.settings import Settings, Training

DEPLOY = (Path(__file__).resolve().parent.parent / "docs" / "how-to" / "production.md").read_text()


def pod_wrapper() -> types.ModuleType:
    """The Python block of docs/how-to/production.md's "Training out of process", as the module a deployment would
    ship."""
    section = DEPLOY[DEPLOY.index("## Training out of process"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("rmi_training_pod")
    exec(compile(code, "docs/how-to/production.md", "exec"), module.__dict__)
    return module


def test_the_default_launcher_is_a_warm_local_worker_and_another_is_named_by_import_path(monkeypatch, tmp_path):
    launcher = lambda spec: build_training_launcher(Settings(home=tmp_path, training=Training(launcher=spec)))  # noqa: E731
    assert Settings().training.launcher == "warm" and isinstance(launcher("warm"), WarmSubprocessClient)
    assert type(launcher("subprocess")) is PipesSubprocessClient
    monkeypatch.setitem(sys.modules, "rmi_training_pod", pod_wrapper())
    from dagster_k8s import PipesK8sClient

    assert isinstance(launcher("rmi_training_pod:training_pod"), PipesK8sClient)


def test_the_documented_training_pod_runs_the_program_on_gpus():
    from dagster_k8s.pipes import build_pod_body

    pod = pod_wrapper()
    body = build_pod_body(pod_name="dagster-candidate-model", image=pod.IMAGE,
                          command=["python", "-m", "rmi_pipeline.training.program"],
                          env_vars={"DAGSTER_PIPES_CONTEXT": "ctx", "DAGSTER_PIPES_MESSAGES": "msg"},
                          base_pod_meta=None, base_pod_spec=pod.POD_SPEC)
    container = body.spec.containers[0]
    assert container.image == pod.IMAGE and container.command[-1] == "rmi_pipeline.training.program"
    assert container.resources.limits["nvidia.com/gpu"] == str(pod.GPUS)
    assert {e.name for e in container.env} >= {"DAGSTER_PIPES_CONTEXT", "DAGSTER_PIPES_MESSAGES"}
    assert container.env_from[0].secret_ref.name == "rmi-secrets"
    assert body.spec.restart_policy == "Never" and body.spec.volumes[0].empty_dir.medium == "Memory"


def test_the_training_program_refuses_to_run_outside_dagster():
    out = subprocess.run([sys.executable, "-m", "rmi_pipeline.training.program"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and "materialize candidate_model" in out.stderr
