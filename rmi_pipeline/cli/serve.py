"""`rmi serve`: the gateway on 127.0.0.1:8000 (FastAPI on uvicorn), answering with the champion and taking feedback."""

from __future__ import annotations

from typing import Annotated

import typer

from ..settings import Settings
from .extras import require
from .home import prepare_home, run_server, server_logging


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 for every interface (set "
                                           "RMI_SERVE_API_KEYS first).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    alias: Annotated[str | None, typer.Option(help="The registry alias to serve and follow; default "
                                                    "RMI_SERVE_MODEL (champion).")] = None,
    upstream: Annotated[str | None, typer.Option(help="An OpenAI-compatible engine to answer instead (vLLM, SGLang, "
                                                      "TGI, llama.cpp, Ollama), by the base URL an OpenAI client "
                                                      "takes, such as http://127.0.0.1:8001/v1: the gateway forwards "
                                                      "to it and records answers and feedback; default "
                                                      "RMI_SERVE_UPSTREAM_URL.")] = None,
    access_log: Annotated[bool, typer.Option("--access-log", help="Log every request line (never bodies).")] = False,
    exit_with_parent: Annotated[bool, typer.Option(hidden=True)] = False,  # how `rmi run` starts it
) -> int:
    """Answer with the champion (or RMI_SERVE_MODEL's alias, such as fast) and take feedback over HTTP: POST
    /v1/answers, /v1/completions and /v1/chat/completions (OpenAI), /v1/feedback; GET /, /v1/models, /healthz,
    /readyz, /metrics (docs/reference/http-api.md). Settings: RMI_SERVE_* (docs/reference/settings.md#serving).
    With --upstream, an engine answers and the gateway routes and records (docs/how-to/serving.md)."""
    require("serve", "rmi serve")
    settings = Settings()
    if upstream:
        settings = settings.model_copy(update={"upstream": type(settings.upstream)(url=upstream)})
    alias = alias or settings.serving.model
    prepare_home(settings)
    from ..serving.app import build_app

    server_logging()
    if exit_with_parent:
        from ..serving.process import exit_with_parent as watch_parent

        watch_parent()
    app = build_app(settings, alias=alias)
    keys = len(settings.serving.api_keys)
    answering = f" through {app.state.gateway.upstream.where}" if settings.upstream.url else ""
    return run_server(app, host, port, f"rmi serve: {settings.model_name}@{alias}{answering} on http://{host}:{port} "
                      f"({f'{keys} API keys' if keys else 'no API keys: anyone who can reach it may call it'}; "
                      "Ctrl-C stops it)", access_log)

