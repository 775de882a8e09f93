"""`rmi serve`: the gateway between users and the champion (FastAPI on uvicorn), wired from its parts.

The routes are in routes/, what they need in dependencies.py, the limits in limits.py, the error replies in
errors.py. With RMI_SERVE_UPSTREAM_URL (`rmi serve --upstream URL`) an engine answers instead (proxy.py). Answers
and feedback are data: they are stored and counted, never logged at INFO, never executed.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from ..settings import Settings
from . import routes
from .dependencies import KEYED
from .errors import HANDLERS
from .gateway import Gateway
from .limits import BodySizeLimit
from .metrics import RequestMetrics

# FastAPI's own OpenTelemetry hooks are off: /metrics is ours, and request bodies must not reach a log
TELEMETRY_OFF = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}


@asynccontextmanager
async def lifespan(app: FastAPI):
    await app.state.gateway.start()
    yield
    await app.state.gateway.stop()


def build_app(settings: Settings, alias: str | None = None) -> FastAPI:
    """The app serving `alias` (default RMI_SERVE_MODEL), answering itself or, with RMI_SERVE_UPSTREAM_URL, through
    that engine; every route but the open ones needs a key while RMI_SERVE_API_KEYS is set."""
    if settings.upstream.url:
        from .proxy import Proxy

        gateway = Proxy(settings, alias or settings.serving.model)
    else:
        gateway = Gateway(settings, alias or settings.serving.model)
    config = gateway.config
    app = FastAPI(title="rmi serve", version=_version(), lifespan=lifespan, telemetry=TELEMETRY_OFF,
                  exception_handlers=HANDLERS,
                  description="Answers from the champion, and the feedback that trains its successor." + (
                      " The answers come from an OpenAI-compatible engine behind the gateway, which records them."
                      if gateway.upstream else ""))
    app.state.gateway = gateway
    for router in routes.UPSTREAM if gateway.upstream else routes.KEYED:
        app.include_router(router, dependencies=KEYED if config.api_keys else [])  # none: nothing to solve
    for router in routes.OPEN + routes.ALWAYS_KEYED:  # the latter check their key themselves
        app.include_router(router)
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"])
    app.add_middleware(BodySizeLimit, max_body_bytes=config.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=gateway.metrics, routes=routes.paths())  # the last added is outermost
    return app


def _version() -> str:
    from .. import __version__

    return __version__
