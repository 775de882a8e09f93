"""What probes and scrapers call, without a key: liveness, readiness (a model loaded) and Prometheus metrics."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from ..dependencies import Served

router = APIRouter()


@router.get("/healthz", summary="The process answers")
async def healthz() -> dict:
    return {"ok": True}


@router.get("/readyz", summary="Ready once a model is loaded")
async def readyz(gateway: Served) -> Response:
    loaded, alias = gateway.model.current, gateway.alias
    if loaded is None:
        return JSONResponse({"ready": False, "alias": alias, "reason": gateway.model.last_error or
                             f"no version of {gateway.model_name!r} has the alias {alias!r} yet"}, 503)
    canary = gateway.canary.current if gateway.canary else None
    return JSONResponse({"ready": True, "alias": alias, "model_version": loaded.version,
                         **({"canary_version": canary.version} if canary else {})})


@router.get("/metrics", summary="Prometheus text format")
async def metrics(gateway: Served) -> Response:
    return Response(await asyncio.to_thread(gateway.metrics.render), media_type=gateway.metrics.content_type)
