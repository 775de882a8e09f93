"""What starts the training program: a Dagster Pipes client, chosen by RMI_TRAIN_LAUNCHER.

`warm` (the default) runs it next to the Dagster run through a warm worker that has torch and Lightning imported
already, a forked process per candidate (rmi_pipeline/training/worker.py), started as a run that will train begins
(its imports overlap the cycle's first steps); `subprocess` starts
`python -m rmi_pipeline.training.program` cold every time. A deployment names a function instead, 'module:function',
that returns another Pipes client: a PipesK8sClient that runs the same program in a GPU pod (docs/how-to/production.md).
candidate_model calls `run(context=, command=, extras=)` on it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from dagster import PipesClient, PipesSubprocessClient, ResourceDefinition

from ..settings import Settings
from ..training.client import COMMAND, warm_up
from ..training.protocol import FOLDER, IDLE
from ..training.worker import worker_folder


class WarmSubprocessClient(PipesSubprocessClient):
    """A PipesSubprocessClient whose command reaches the warm worker of `folder`; training on more than one
    process (DDP) starts cold, since Lightning starts the others from the command line."""

    def __init__(self, folder: Path, idle_seconds: float):
        super().__init__(env={FOLDER: str(folder), IDLE: str(idle_seconds)})

    def run(self, *, context, command, extras=None, env=None, cwd=None):
        trainer = (extras or {}).get("trainer") or {}
        if _one_process(trainer):
            command = COMMAND
        return super().run(context=context, command=command, extras=extras, env=env, cwd=cwd)


def training_launcher_resource(settings: Settings) -> ResourceDefinition:
    """The launcher as the runs' resource: Dagster sets it up as a run whose steps train begins, and the warm
    worker starts then, in the background, with the environment the run's training client will have."""
    launcher = build_training_launcher(settings)

    def set_up(_context) -> PipesClient:
        if isinstance(launcher, WarmSubprocessClient):
            warm_up({**os.environ, **launcher.env})
        return launcher

    return ResourceDefinition(resource_fn=set_up, description="Starts each candidate's training program "
                              f"(RMI_TRAIN_LAUNCHER: {settings.training.launcher}).")


def _one_process(trainer: dict) -> bool:
    return str(trainer.get("devices", "1")) == "1" and int(trainer.get("num_nodes", 1)) == 1


def build_training_launcher(settings: Settings) -> PipesClient:
    spec = settings.training.launcher
    if spec == "warm":
        return WarmSubprocessClient(worker_folder(settings.resolved_home), settings.training.worker_idle_seconds)
    if spec == "subprocess":
        return PipesSubprocessClient()
    module, _, name = spec.partition(":")
    if not name:
        raise ValueError(f"RMI_TRAIN_LAUNCHER must be 'warm', 'subprocess' or 'module:function', not {spec!r}")
    client = getattr(importlib.import_module(module), name)()
    if not isinstance(client, PipesClient):
        raise TypeError(f"{spec} returned {type(client).__name__}, not a Dagster Pipes client")
    return client
