"""Every status each route answers, as its OpenAPI document says it (FastAPI `responses=`): the schema is the
contract, and tests/test_openapi_contract.py holds the gateway to it.

Refusals come in two shapes (errors.py): the gateway's own, and OpenAI's on the OpenAI routes.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class FieldProblem(BaseModel):
    field: str
    problem: str


class GatewayError(BaseModel):
    error: str = Field(description="What was refused or failed, in a sentence a person can act on.")
    fields: list[FieldProblem] | None = Field(default=None, description="422: each field that is not valid.")


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, not_found_error, authentication_error, "
                      "rate_limit_error or server_error.")
    param: str | None = Field(description="The request field the error is about, where one is.")
    code: str | None = Field(description="What a client can match: model_not_found, unsupported_option, "
                             "too_many_answers, invalid_body...")


class OpenAIError(BaseModel):
    error: OpenAIErrorDetail


# what each status means wherever it is answered; a route adds or replaces its own
MEANING = {
    400: "The body is not JSON.",
    401: "No valid API key (only while RMI_SERVE_API_KEYS is set).",
    413: "Too many prompts (RMI_SERVE_MAX_PROMPTS), a text longer than RMI_FEEDBACK_MAX_TEXT_CHARS, or a body "
         "over RMI_SERVE_MAX_BODY_BYTES.",
    422: "The body is not valid: the error names each field.",
    429: "The key's request rate is exceeded (only while RMI_SERVE_API_KEYS is set); retry after Retry-After.",
    503: "No model to answer with yet, or the answer could not be recorded (so it was not given).",
}
KEYED = (401, 429)  # answered by every keyed route while keys are set
# one server-sent event (before Open API 3.2, a stream's `schema` describes each of its events)
EVENT = {"type": "object", "required": ["data"], "properties": {
    "data": {"type": "string", "description": "A chunk in OpenAI's shape, as JSON; the last event: [DONE]."}}}


def refusals(*statuses: int, openai: bool = False, **meanings: str) -> dict:
    """`responses=` for these statuses (and 401 and 429, which every keyed route may answer), in the route's
    error shape; `meanings` ("s404"="...") replace or add a status's description."""
    model = OpenAIError if openai else GatewayError
    described = {**MEANING, **{int(k.removeprefix("s")): v for k, v in meanings.items()}}
    return {status: {"model": model, "description": described[status]}
            for status in sorted({*statuses, *KEYED})}


def returns(description: str, streams: bool = False) -> dict:
    """The 200 of a route that returns JSON built by hand (or, with `streams`, server-sent events)."""
    content = {"application/json": {"schema": {"type": "object"}}}
    if streams:
        content["text/event-stream"] = {"schema": EVENT}
    return {200: {"description": description, "content": content}}
