"""Every refusal and failure as one JSON shape, {"error": "..."}: what a client reads and a person can act on.

A failure's trace stays in the gateway's log; the client learns only that it failed.
"""

from __future__ import annotations

import logging

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

log = logging.getLogger("rmi.serve")
FIELDS_SHOWN = 5  # in the error's sentence; "fields" lists them all


async def refused(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)


async def malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
    fields = [{"field": ".".join(str(p) for p in e["loc"] if p != "body") or "body", "problem": e["msg"]}
              for e in exc.errors()]
    return JSONResponse({"error": "the request body is not valid: " + "; ".join(
        f"{f['field']}: {f['problem']}" for f in fields[:FIELDS_SHOWN]), "fields": fields}, 422)


async def failed(request: Request, exc: Exception) -> JSONResponse:
    log.exception("request to %s failed", request.url.path)
    return JSONResponse({"error": "the gateway failed to handle this request; it is in the gateway's log"}, 500)


HANDLERS = {HTTPException: refused, RequestValidationError: malformed, Exception: failed}
