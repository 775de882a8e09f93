"""What starts the training program: a Dagster Pipes client, chosen by RMI_TRAINING_LAUNCHER.

`subprocess` (the default) runs `python -m rmi_pipeline.train_candidate` next to the Dagster run. A deployment
names a function instead, 'module:function', that returns another Pipes client: a PipesK8sClient that runs the
same program in a GPU pod (deploy/README.md). candidate_model calls `run(context=, command=, extras=)` on it.
"""

from __future__ import annotations

import importlib

from dagster import PipesClient, PipesSubprocessClient


def build_training_launcher(spec: str) -> PipesClient:
    if spec == "subprocess":
        return PipesSubprocessClient()
    module, _, name = spec.partition(":")
    if not name:
        raise ValueError(f"RMI_TRAINING_LAUNCHER must be 'subprocess' or 'module:function', not {spec!r}")
    client = getattr(importlib.import_module(module), name)()
    if not isinstance(client, PipesClient):
        raise TypeError(f"{spec} returned {type(client).__name__}, not a Dagster Pipes client")
    return client
