"""Answers from the served model, in the gateway's own shape (OpenAI's shapes are in routes/openai.py). An answer is
given only once it is in the feedback log, so feedback on it always finds it."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.routing import APIRoute
from starlette.responses import Response

from ..dependencies import AnswersBody, Served, answers_asked
from ..documented import refusals
from ..gateway import Gateway, NotReady
from ..log import LogUnavailable
from ..options import PLAIN, Asked

try:  # the reply's JSON as FastAPI's JSONResponse writes it (compact, UTF-8), with orjson where it is installed
    from orjson import dumps as _dumps
except ImportError:
    import json

    def _dumps(content) -> bytes:
        return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()


class FastPath(APIRoute):
    """The route as declared (its OpenAPI document, its refusals), answered without FastAPI's per-request work
    where the request is a plain valid one (dependencies.answers_asked): POST /v1/answers is the hot route, and
    that work cost the event loop more than the rest of a request."""

    def get_route_handler(self):
        documented = super().get_route_handler()

        async def handler(request: Request) -> Response:
            asked = await answers_asked(request)
            if asked is None:
                return await documented(request)
            gateway, body = asked
            got = await answered(gateway, body.prompts, body.user_id)
            return Response(_dumps(shown(got)), media_type="application/json")

        return handler


router = APIRouter(route_class=FastPath)


@router.post("/v1/answers", summary="Answers from the served model", responses=refusals(400, 413, 422, 503))
async def answers(body: AnswersBody, gateway: Served) -> dict:
    return shown(await answered(gateway, body.prompts, body.user_id))


def shown(got: list[dict]) -> dict:
    return {"answers": [{"response_id": a["response_id"], "completion": a["completion"],
                         "model_version": a["model_version"]} for a in got]}


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
