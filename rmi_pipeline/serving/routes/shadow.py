"""The challenger in shadow (RMI_SERVE_SHADOW=true): how its unseen answers to the same requests compare, per
slice."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from ..dependencies import Served
from ..documented import refusals

router = APIRouter()


@router.get("/v1/shadow", summary="The challenger in shadow: agreement, reward, latency",
            responses=refusals(404, s404="Shadow mode is off (RMI_SERVE_SHADOW)."))
async def shadow(gateway: Served) -> dict:
    if gateway.shadow is None:
        raise HTTPException(404, "shadow mode is off (RMI_SERVE_SHADOW=true turns it on)")
    return gateway.shadow.report()
