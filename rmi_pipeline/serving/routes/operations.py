"""What probes and scrapers call, without a key: liveness, readiness (a model loaded) and Prometheus metrics."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from ..dependencies import Served
from ..metrics import PrometheusText

router = APIRouter()


@router.get("/healthz", summary="The process answers")
async def healthz() -> dict:
    return {"ok": True}


@router.get("/readyz", summary="Ready once a model is loaded", response_model=None,
            responses={200: {"description": "A version is loaded: which, and the canary's where one is on trial."},
                       503: {"description": "No version loaded yet: the reason.",
                             "content": {"application/json": {"schema": {"type": "object"}}}}})
async def readyz(gateway: Served) -> Response:
    loaded, alias = gateway.model.current, gateway.alias
    if loaded is None:
        return JSONResponse({"ready": False, "alias": alias, "reason": gateway.model.last_error or
                             f"no version of {gateway.model_name!r} has the alias {alias!r} yet"}, 503)
    canary = gateway.canary.current if gateway.canary else None
    return JSONResponse({"ready": True, "alias": alias, "model_version": loaded.version,
                         **({"canary_version": canary.version} if canary else {})})


@router.get("/metrics", summary="Prometheus text format", response_class=PrometheusText,
            responses={200: {"description": "Requests, latency, batch sizes, feedback, the version served."}})
async def metrics(gateway: Served) -> PrometheusText:
    return PrometheusText(await asyncio.to_thread(gateway.metrics.render))
