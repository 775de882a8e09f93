"""Helpers for tests of `rmi serve`: a gateway in a thread of the test process, and what reached the warehouse."""

import threading
import time
from contextlib import contextmanager


def warehouse_events(settings) -> list[dict]:
    """Ingest every batch file the gateways wrote (one tick of the loop's sensor), then read the warehouse."""
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef

    from rmi_pipeline.automation.in_process import ingest_new_batches
    from rmi_pipeline.definitions import build_definitions

    defs = build_definitions(settings)
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(settings.dagster_home))) as instance:
        ingest_new_batches(defs, instance)
    with defs.resources["warehouse"].connect(read_only=True) as conn:
        frame = conn.sql("SELECT event_id, prompt, completion, model_version, rating, correction, user_id, "
                         "meta->>'response_id' AS response_id, meta->>'client' AS client, meta->>'cut' AS cut "
                         "FROM feedback_events").pl()
    return frame.to_dicts()


def untrained_home(home, versions: int = 1, **env: str):
    """An RMI_HOME at `home` whose registry holds `versions` fresh tiny arithmetic models (v1 champion), built
    without Lightning: a home to serve from in seconds, for tests of the API's shape. (Settings, registry)."""
    import pytest
    import torch

    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.ml import checkpoint
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe, tokens
    from rmi_pipeline.recipes.arithmetic.gpt import GPT, GPTConfig
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.settings import DEFAULT_RECIPE, Settings

    with pytest.MonkeyPatch.context() as mp:
        for key, value in {"RMI_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"),
                           "MLFLOW_DISABLE_TELEMETRY": "true", **env}.items():
            mp.setenv(key, value)
        settings = Settings()
    prepare_home(settings)
    registry = build_resources(settings)["registry"]
    config = {"vocab_size": len(tokens.VOCAB), **ArithmeticRecipe.sizes["tiny"]}
    torch.manual_seed(0)
    with registry.run("serving", tags={}) as run_id:
        for _ in range(versions):
            registry.register_model(run_id, checkpoint.dumps(config, GPT(GPTConfig(**config)).state_dict()),
                                    DEFAULT_RECIPE, tags={})
    registry.promote("1", {"promoted_by": "test"})
    return settings, registry


@contextmanager
def gateway_in_thread(settings):
    """`build_app` under uvicorn in a thread of this process, on a free port (cheaper than a process per variant)."""
    from rmi_pipeline.serving.app import build_app

    with app_in_thread(build_app(settings)) as url:
        yield url


@contextmanager
def app_in_thread(app):
    """An ASGI app under uvicorn in a thread of this process, on a free port; its base URL."""
    import uvicorn

    from rmi_pipeline.serving.process import free_port

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the app did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(30)


def forked_gateway(env: dict[str, str], args: list[str], out: str):
    """`rmi serve ARGS` in a process forked from a server that imported the package once (multiprocessing's
    forkserver): a fresh process up in about a second instead of `python -m`'s several, for tests that kill many.
    Its output goes to the file `out`. (multiprocessing Process, its base URL)."""
    import multiprocessing

    from rmi_pipeline.serving.process import free_port

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["gateway", "rmi_pipeline.cli.main", "rmi_pipeline.serving.app",
                                    "rmi_pipeline.serving.proxy", "rmi_pipeline.recipes.arithmetic", "uvicorn",
                                    "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store",
                                    "mlflow.store.model_registry.sqlalchemy_store"])
    port = free_port()
    process = context.Process(target=_serve, args=(env, ["serve", "--port", str(port), "--exit-with-parent", *args],
                                                   out), daemon=True)
    process.start()
    return process, f"http://127.0.0.1:{port}"


def _serve(env: dict[str, str], argv: list[str], out: str) -> None:
    import os
    import sys

    os.environ.update(env)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from rmi_pipeline.cli.main import main

    sys.exit(main(argv))
