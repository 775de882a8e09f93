"""In front of an engine (`rmi serve --upstream URL`): OpenAI's completions and chat completions (streamed or not),
and /v1/answers, forwarded to the engine under its name for the arm's model, every answer recorded with a response
id before the client has it (a stream: before its `data: [DONE]`), so that feedback on it lands as on the gateway's
own answers. The engine's options pass through but those whose answer is not text after its prompt (tools, echo...);
with `temperature` unset the gateway decides, as for its own answers (docs/how-to/serving.md#in-front-of-your-engine).
GET /v1/models lists what the gateway routes, with each alias's engine name (`upstream_model`)."""

from __future__ import annotations

from contextlib import contextmanager

from fastapi import APIRouter, HTTPException

from ..bodies import CompletionsRequest
from ..catalogue import arm_named
from ..dependencies import AnswersBody, ChatBody, CompletionsBody, Served
from ..documented import refusals, returns
from ..errors import Refused
from ..gateway import NotReady
from ..log import LogUnavailable
from ..proxy import Proxy, chat_prompt
from ..upstream import EngineFailed, EngineRefused
from .answers import not_ready

router = APIRouter()
FAILED = ("The engine could not be reached, failed, took longer than RMI_SERVE_UPSTREAM_TIMEOUT_SECONDS, replied with "
          "more than RMI_SERVE_UPSTREAM_MAX_REPLY_BYTES or out of OpenAI's shapes: nothing was recorded. (Past a "
          "stream's first chunk, an error event ends it instead, without data: [DONE].)")
OPENAI = refusals(400, 404, 413, 422, 502, 503, openai=True, s502=FAILED,
                  s404="The model named is not served here (GET /v1/models lists what is).",
                  s400="An option whose answer is not text (tools, functions, audio, echo...), more answers than one "
                  "request may ask for, a chat that does not end with the user's message, a request the engine "
                  "refused (its reason follows), or a body that is not JSON.")


@router.post("/v1/completions", summary="OpenAI completions, answered by the engine (stream: server-sent events)",
             response_model=None, responses={**returns("The engine's completion, with this gateway's response ids; "
                                                       "with stream, its chunks as server-sent events", True),
                                             **OPENAI})
async def completions(body: CompletionsBody, gateway: Served):
    pinned = arm_named(gateway, body.model)
    gateway.check_options(body, len(body.prompts))
    return await _forwarded(gateway, "completions", body, body.prompts, pinned)


@router.post("/v1/chat/completions", summary="OpenAI chat completions, answered by the engine (stream: server-sent "
             "events)", response_model=None,
             responses={**returns("The engine's chat completion, with this gateway's response ids; with stream, its "
                                  "chunks as server-sent events", True), **OPENAI})
async def chat_completions(body: ChatBody, gateway: Served):
    pinned = arm_named(gateway, body.model)
    gateway.check_options(body, 1)
    try:
        prompt = chat_prompt(body.messages)
    except ValueError as exc:
        raise Refused(400, f"messages: {exc}", param="messages", code="unrenderable_chat") from None
    gateway.limits.check_text("the chat's last message", prompt)
    return await _forwarded(gateway, "chat/completions", body, [prompt], pinned)


@router.post("/v1/answers", summary="Answers from the engine, in the gateway's own shape",
             responses=refusals(400, 413, 422, 502, 503, s502=FAILED, s400="The engine refused the request (its "
                                "reason follows), or the body is not JSON."))
async def answers(body: AnswersBody, gateway: Served) -> dict:
    asked = CompletionsRequest(prompt=body.prompts, user=body.user_id)
    reply = await _forwarded(gateway, "completions", asked, body.prompts, None)
    return {"answers": [{"response_id": c["response_id"], "completion": c["text"], "model_version": c["model_version"]}
                        for c in sorted(reply["choices"], key=lambda c: c["index"])]}


async def _forwarded(gateway: Proxy, path: str, body, prompts: list[str], pinned: str | None):
    with _failures(gateway):
        if body.stream:
            return await gateway.stream(path, body, prompts, pinned)
        return await gateway.reply(path, body, prompts, pinned)


@contextmanager
def _failures(gateway: Proxy):
    """The engine's failure a 502, its refusal a 400 with its reason, no model yet or no room in the log a 503."""
    try:
        yield
    except NotReady:
        raise not_ready(gateway) from None
    except EngineFailed as exc:
        raise Refused(502, f"{exc}: nothing was recorded", code="upstream_failed") from None
    except EngineRefused as exc:
        raise Refused(400, str(exc), param=exc.param, code="upstream_refused") from None
    except LogUnavailable as exc:
        raise HTTPException(503, f"{exc}: the answer could not be recorded, so it was not given") from None
