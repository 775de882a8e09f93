"""Answers from the served model: the gateway's own shape, and OpenAI's completions shape for clients that already
speak it. An answer is given only once it is in the feedback log, so feedback on it always finds it."""

from __future__ import annotations

import time

from fastapi import APIRouter, HTTPException

from ..dependencies import AnswersBody, CompletionsBody, Served
from ..gateway import Gateway, NotReady
from ..log import LogUnavailable

router = APIRouter()


@router.post("/v1/answers", summary="Answers from the served model")
async def answers(body: AnswersBody, gateway: Served) -> dict:
    got = await _answered(gateway, body.prompts, body.user_id)
    return {"answers": [{k: a[k] for k in ("response_id", "completion", "model_version")} for a in got]}


@router.post("/v1/completions", summary="OpenAI-compatible completions")
async def completions(body: CompletionsBody, gateway: Served) -> dict:
    prompts = body.prompts
    got = await _answered(gateway, prompts, body.user_id)
    asked, answered = sum(map(len, prompts)), sum(len(a["completion"]) for a in got)
    return {"id": got[0]["response_id"], "object": "text_completion", "created": int(time.time()),
            "model": f"{gateway.model_name}/{got[0]['model_version']}",
            "choices": [{"index": i, "text": a["completion"], "logprobs": None, "finish_reason": "stop",
                         "response_id": a["response_id"], "model_version": a["model_version"]}
                        for i, a in enumerate(got)],
            # the recipe decodes with its own tokens: usage counts characters
            "usage": {"prompt_tokens": asked, "completion_tokens": answered, "total_tokens": asked + answered}}


async def _answered(gateway: Gateway, prompts: list[str], user_id: str) -> list[dict]:
    try:
        answers = await gateway.answer(prompts, user_id)
    except NotReady:
        raise HTTPException(503, f"no model to answer with yet: no version of {gateway.model_name!r} has "
                            f"the alias {gateway.alias!r}") from None
    except LogUnavailable as exc:
        raise HTTPException(503, f"{exc}: the answer could not be recorded, so it was not given") from None
    gateway.metrics.prompts.inc(len(prompts))
    return answers
