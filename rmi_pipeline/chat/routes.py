"""The chat app's HTTP routes: Slack's requests, and a probe's."""

from __future__ import annotations

from fastapi import APIRouter, Request

router = APIRouter()


@router.post("/slack/events")
async def events(request: Request):
    return await request.app.state.slack.handle(request)


@router.get("/healthz")
def healthz():
    return {"status": "ok"}
