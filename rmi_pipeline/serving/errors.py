"""Every refusal and failure in one JSON shape per API: the gateway's own {"error": "..."}, and OpenAI's
{"error": {"message", "type", "param", "code"}} on the OpenAI routes (OPENAI_PATHS), which its clients read.

A failure's trace stays in the gateway's log; the client learns only that it failed.
"""

from __future__ import annotations

import logging

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException  # FastAPI's own, and Starlette's (a body that is not JSON, a 404)

log = logging.getLogger("rmi.serve")
FIELDS_SHOWN = 5  # in the error's sentence; "fields" lists them all
OPENAI_PATHS = ("/v1/completions", "/v1/chat/completions", "/v1/models")
# OpenAI's error types by status; any other is an invalid request
OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                429: "rate_limit_error", 500: "server_error", 502: "server_error", 503: "server_error"}


class Refused(HTTPException):
    """A refusal that names the request field it is about (OpenAI's `param`) and a code a client can match."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(status, message)
        self.param, self.code = param, code


def openai_path(path: str) -> bool:
    return path.startswith(OPENAI_PATHS)


def shaped(path: str, status: int, message: str, param: str | None = None, code: str | None = None,
           **more) -> dict:
    """The body of a refusal on `path`, in its API's shape; `more`: the gateway's own extra keys ("fields")."""
    if openai_path(path):
        return {"error": {"message": message, "type": OPENAI_TYPES.get(status, "invalid_request_error"),
                          "param": param, "code": code}}
    return {"error": message, **more}


async def refused(request: Request, exc: HTTPException) -> JSONResponse:
    body = shaped(request.url.path, exc.status_code, str(exc.detail), getattr(exc, "param", None),
                  getattr(exc, "code", None))
    return JSONResponse(body, exc.status_code, headers=exc.headers)


async def malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
    fields = [{"field": ".".join(str(p) for p in e["loc"] if p != "body") or "body", "problem": e["msg"]}
              for e in exc.errors()]
    message = "the request body is not valid: " + "; ".join(f"{f['field']}: {f['problem']}" for f in
                                                             fields[:FIELDS_SHOWN])
    return JSONResponse(shaped(request.url.path, 422, message, fields[0]["field"] if fields else None,
                               "invalid_body", fields=fields), 422)


async def failed(request: Request, exc: Exception) -> JSONResponse:
    log.exception("request to %s failed", request.url.path)
    return JSONResponse(shaped(request.url.path, 500, "the gateway failed to handle this request; it is in the "
                               "gateway's log"), 500)


HANDLERS = {HTTPException: refused, RequestValidationError: malformed, Exception: failed}
