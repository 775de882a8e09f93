"""Answers from the served model, in the gateway's own shape (OpenAI's shapes are in routes/openai.py). An answer is
given only once it is in the feedback log, so feedback on it always finds it."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from ..dependencies import AnswersBody, Served
from ..documented import refusals
from ..gateway import Gateway, NotReady
from ..log import LogUnavailable
from ..options import PLAIN, Asked

router = APIRouter()


@router.post("/v1/answers", summary="Answers from the served model", responses=refusals(400, 413, 422, 503))
async def answers(body: AnswersBody, gateway: Served) -> dict:
    got = await answered(gateway, body.prompts, body.user_id)
    return {"answers": [{k: a[k] for k in ("response_id", "completion", "model_version")} for a in got]}


async def answered(gateway: Gateway, prompts: list[str], user_id: str, options: Asked = PLAIN,
                   arm: str | None = None, stream: bool = False) -> list[dict]:
    """The recorded answers to `prompts` (503 while there is no model, or the log cannot take them)."""
    try:
        answers = await gateway.answer(prompts, user_id, options, arm, stream)
    except NotReady:
        raise not_ready(gateway) from None
    except LogUnavailable as exc:
        raise HTTPException(503, f"{exc}: the answer could not be recorded, so it was not given") from None
    gateway.metrics.prompts.inc(len(prompts))
    return answers


def not_ready(gateway: Gateway) -> HTTPException:
    return HTTPException(503, f"no model to answer with yet: no version of {gateway.model_name!r} has the alias "
                         f"{gateway.alias!r}")
