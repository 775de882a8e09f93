"""OpenAI's API as its clients use it (the official SDKs, LangChain, LlamaIndex...): completions, chat completions
(streamed or not) and the model list, answered by the served model and recorded like any answer, so that
feedback on a reply's `id` lands (docs/how-to/serving.md: what is honoured, refused, and how a chat becomes a
prompt)."""

from __future__ import annotations

import time

from fastapi import APIRouter

from .. import replies
from ..catalogue import arm_named, listed
from ..dependencies import ChatBody, CompletionsBody, Served
from ..documented import refusals, returns
from ..errors import Refused
from ..gateway import Gateway, NotReady
from ..options import asked
from ..streaming import events
from .answers import answered, not_ready

router = APIRouter()
models_router = APIRouter()  # the model list: also served in front of an engine (routes/upstream.py)
UNKNOWN_MODEL = "The model named is not served here (GET /v1/models lists what is)."
REFUSED = refusals(400, 404, 413, 422, 503, openai=True, s404=UNKNOWN_MODEL, s400=(
    "An option this gateway does not honour, more answers than one request may ask for, or a chat it cannot "
    "render: the error names the option (param) and says why (docs/how-to/serving.md lists them); or a body that "
    "is not JSON."))


@router.post("/v1/completions", summary="OpenAI completions (stream: server-sent events)", response_model=None,
             responses={**returns("OpenAI's completion; with stream, its chunks as server-sent events", True),
                        **REFUSED})
async def completions(body: CompletionsBody, gateway: Served):
    arm = arm_named(gateway, body.model)
    options = asked(body, gateway.recipe, gateway.config.max_prompts, len(body.prompts))
    got = await answered(gateway, [p for p in body.prompts for _ in range(body.n)], body.user_id, options, arm,
                         body.stream)
    return _reply(gateway, got, body, replies.completion, replies.completion_chunks)


@router.post("/v1/chat/completions", summary="OpenAI chat completions (stream: server-sent events)",
             response_model=None,
             responses={**returns("OpenAI's chat completion; with stream, its chunks as server-sent events", True),
                        **REFUSED})
async def chat_completions(body: ChatBody, gateway: Served):
    arm = arm_named(gateway, body.model)
    options = asked(body, gateway.recipe, gateway.config.max_prompts, 1)
    prompt = _prompt(gateway, body, arm or gateway.arm(body.user_id))
    got = await answered(gateway, [prompt] * body.n, body.user_id, options, arm, body.stream)
    return _reply(gateway, got, body, replies.chat_completion, replies.chat_chunks)


@models_router.get("/v1/models", summary="The models answering here: NAME, and each alias with its version",
            responses=refusals(openai=True))
async def models(gateway: Served) -> dict:
    return replies.model_list(listed(gateway))


@models_router.get("/v1/models/{model}", summary="One of the models GET /v1/models lists",
            responses=refusals(404, 422, openai=True, s404=UNKNOWN_MODEL))
async def model(model: str, gateway: Served) -> dict:
    for entry in listed(gateway):
        if entry["id"] == model:
            return entry
    raise Refused(404, f"model: {model!r} is not served here", param="model", code="model_not_found")


def _prompt(gateway: Gateway, body, arm: str) -> str:
    """The prompt the chat asks, rendered by the recipe for the model of `arm` (400 where it cannot be)."""
    messages = []
    for i, message in enumerate(body.messages):
        try:
            text = message.text()
        except ValueError as exc:
            raise Refused(400, f"messages[{i}].content: {exc}", param=f"messages[{i}].content",
                          code="unsupported_content") from None
        gateway.limits.check_text(f"messages[{i}].content", text)
        messages.append({"role": message.role, "content": text})
    try:
        prompt = gateway.recipe.chat_prompt(gateway.loaded(arm), messages)
    except NotReady:
        raise not_ready(gateway) from None
    except ValueError as exc:
        raise Refused(400, f"messages: {exc}", param="messages", code="unrenderable_chat") from None
    gateway.limits.check_text("the chat as the model reads it", prompt)
    return prompt


def _reply(gateway: Gateway, got: list[dict], body, whole, chunks):
    """The answers in OpenAI's shape, or streamed: each split into the recipe's tokens once all are recorded."""
    model, created = f"{gateway.model_name}/{got[0]['model_version']}", int(time.time())
    if not body.stream:
        return whole(got, model, body.n, created)
    return events(chunks(got, [a["pieces"] for a in got], model, body.n, created, body.include_usage))
