"""What a route declares it needs: the gateway (from app.state), a valid API key within its rate, a body within
the limits. All async: FastAPI runs a plain function in a worker thread, a hop on every request.

`answers_asked` does the same for POST /v1/answers without FastAPI solving it, the busiest route's fast path.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from pydantic import ValidationError

from .bodies import AnswersRequest, ChatRequest, CompletionsRequest, FeedbackRequest
from .gateway import Gateway


async def current_gateway(request: Request) -> Gateway:
    return request.app.state.gateway


Served = Annotated[Gateway, Depends(current_gateway)]


async def authorized(request: Request, gateway: Served) -> None:
    """A valid key in 'Authorization: Bearer KEY' or 'X-API-Key' (401), within its rate (429). The key is compared
    with every key, always: the time taken tells nothing about which one nearly matched."""
    given = _given_key(request)
    matches = [hmac.compare_digest(given.encode(), key.encode()) for key in gateway.config.api_keys]
    if not given or not any(matches):
        raise HTTPException(401, "a valid API key is required (header 'Authorization: Bearer KEY')")
    gateway.limiter.check(key_id(request))


def _given_key(request: Request) -> str:
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")


def key_id(request: Request) -> str:
    """Which key a request came with, by a hash of it: what the rate limit and an audit name it by."""
    return hashlib.sha256(_given_key(request).encode()).hexdigest()[:16]


KEYED = [Depends(authorized)]  # the keyed routes' guard while RMI_SERVE_API_KEYS is set


async def answers_within_limits(body: AnswersRequest, gateway: Served) -> AnswersRequest:
    gateway.limits.check_prompts(body.prompts, body.user_id)
    return body


async def completions_within_limits(body: CompletionsRequest, gateway: Served) -> CompletionsRequest:
    gateway.limits.check_prompts(body.prompts, body.user_id)
    return body


async def chat_within_limits(body: ChatRequest, gateway: Served) -> ChatRequest:
    for i, message in enumerate(body.messages):
        if isinstance(message.content, str):  # text parts are checked once joined, by the route
            gateway.limits.check_text(f"messages[{i}].content", message.content)
    gateway.limits.check_text("user", body.user_id)
    return body


async def feedback_within_limits(body: FeedbackRequest, gateway: Served) -> FeedbackRequest:
    for field in ("correction", "comment"):
        gateway.limits.check_text(field, getattr(body, field))
    for key, value in body.meta.items():
        gateway.limits.check_text(f"meta.{key}", str(value))
    return body


async def answers_asked(request: Request) -> tuple[Gateway, AnswersRequest] | None:
    """What the Depends of POST /v1/answers make of a request (the gateway; a valid key within its rate, while keys
    are set; the body, within the limits), in the order FastAPI solves them, without its solving them: that took
    a third of the event loop's time per request at 64 clients. None where the body is not plainly a valid
    AnswersRequest in JSON: FastAPI then refuses it (or takes it) as the documented route always did."""
    kind = request.headers.get("content-type", "").lower()
    if kind != "application/json" and not kind.startswith("application/json;"):
        return None
    try:
        body = AnswersRequest.model_validate_json(await request.body())
    except ValidationError:
        return None
    gateway = request.app.state.gateway
    if gateway.config.api_keys:  # as KEYED guards the keyed routes (app.py)
        await authorized(request, gateway)
    return gateway, await answers_within_limits(body, gateway)


AnswersBody = Annotated[AnswersRequest, Depends(answers_within_limits)]
CompletionsBody = Annotated[CompletionsRequest, Depends(completions_within_limits)]
ChatBody = Annotated[ChatRequest, Depends(chat_within_limits)]
FeedbackBody = Annotated[FeedbackRequest, Depends(feedback_within_limits)]
