"""Feedback on an answer, acknowledged (202) only once it is durable in the log; and writing what the log holds
into feedback batch files on demand, instead of at the next flush."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, HTTPException

from ..dependencies import FeedbackBody, Served
from ..documented import refusals
from ..log import LogUnavailable, UnknownResponse

router = APIRouter()


@router.post("/v1/feedback", status_code=202, summary="A rating or implicit signal on an answer; 202 once durable",
             responses=refusals(400, 404, 413, 422, 503, s404="No answer has this response id, or its feedback window "
                                "(RMI_SERVE_FEEDBACK_WINDOW_HOURS) has passed.", s503="The feedback could not be "
                                "recorded (the log is full or out of reach): send it again later."))
async def feedback(body: FeedbackBody, gateway: Served) -> dict:
    try:
        event_id = await asyncio.wrap_future(gateway.log.record_feedback(
            body.response_id, body.rating, body.correction, body.comment, body.source, body.user_id, body.meta,
            body.event_id, body.skill))
    except UnknownResponse as exc:
        raise HTTPException(404, str(exc)) from None
    except LogUnavailable as exc:
        raise HTTPException(503, f"{exc}: the feedback was not recorded; send it again later") from None
    # one label for every implicit signal: the names are the client's, and a label per name would grow unbounded
    gateway.metrics.feedback.labels(body.rating or "implicit").inc()
    return {"event_id": event_id, "status": "recorded"}


@router.post("/v1/flush", summary="Write logged events into batch files now",
             responses=refusals(503, s503="The object store is out of reach: the events stay in the log."))
async def flush(gateway: Served) -> dict:
    try:
        names = await gateway.flush()
    except Exception as exc:  # noqa: BLE001 - the store out of reach
        raise HTTPException(503, f"could not write a feedback batch (kept in the log): {str(exc)[:200]}") from None
    return {"batches": names}
