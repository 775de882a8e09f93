"""Deletion of a user's feedback on request. The gateway removes the user's answers and events from its own log at
once and records the request (durable before it answers 202); the forget sensor's run, or the next `rmi feedback
forget`, completes it in every other store (privacy/forget.py). Always behind an API key, since it deletes."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request

from ...privacy.forget import request as request_deletion
from ...privacy.scope import Scope
from ..dependencies import Served, authorized, key_id

router = APIRouter()


async def keyed(request: Request, gateway: Served) -> None:
    """A valid key, even while other routes take none: without RMI_SERVE_API_KEYS nobody may delete (403)."""
    if not gateway.config.api_keys:
        raise HTTPException(403, "deleting a user's feedback needs an API key and this gateway has none: set "
                            "RMI_SERVE_API_KEYS (or run `rmi feedback forget --user ID` where the stores are)")
    await authorized(request, gateway)


def _error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"example": {"error": "..."}}}}


RESPONSES = {
    202: {"description": "The deletion is recorded (durable) and the user's rows are gone from this gateway's log; "
                         "the rest completes within a sensor interval. The audit entry privacy/audit/REQUEST_ID.json "
                         "says what was removed where."},
    401: _error("No valid API key."),
    403: _error("This gateway has no API keys (RMI_SERVE_API_KEYS unset): it deletes nothing."),
    422: _error("The user id is empty or too long, or the reason too long."),
    429: _error("The key's request rate is exceeded."),
    503: _error("The request could not be recorded (the object store is out of reach): nothing was deleted."),
}


@router.delete("/v1/users/{user_id}/feedback", status_code=202, dependencies=[Depends(keyed)], responses=RESPONSES,
               summary="Delete a user's feedback from every store; 202 once the request is durable")
async def forget_user(user_id: Annotated[str, Path(min_length=1, max_length=200, description="As events carry it "
                                                   "in user_id.")],
                      request: Request, gateway: Served,
                      reason: Annotated[str, Query(max_length=500, description="Why, for the audit entry (the "
                                                   "user's id in it is replaced).")] = "requested through the gateway"
                      ) -> dict:
    if not user_id.strip():
        raise HTTPException(422, "the user id must not be blank")
    scope = Scope(user_id=user_id)
    try:
        request_id = await asyncio.to_thread(request_deletion, None, scope, by=f"gateway key {key_id(request)}",
                                             via="gateway", reason=reason, storage=gateway.storage)
    except ConnectionError as exc:
        raise HTTPException(503, f"the deletion could not be recorded, so nothing was deleted: {exc}") from None
    removed = await asyncio.to_thread(gateway.log.forget, scope)
    return {"request_id": request_id, "status": "accepted", "removed_from_gateway_log": removed}
