"""`rmi serve`: the gateway between users and the champion (FastAPI on uvicorn).

    POST /v1/answers      {prompts, user_id} -> {answers: [{response_id, completion, model_version}]}
    POST /v1/completions  the OpenAI completions shape, for clients that already speak it
    POST /v1/feedback     {response_id, rating, correction?, comment?} -> 202 once the event is on disk
    POST /v1/flush        write what the log holds into feedback batch files now
    GET  /v1/shadow       with RMI_SHADOW=true: the challenger's unseen answers to the same requests, per slice
    GET  /healthz  /readyz  /metrics  /   liveness, a champion loaded, Prometheus text, a chat page

Answers and feedback are data: they are stored and counted, never logged at INFO, never executed.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import socket
import time
import uuid
from contextlib import asynccontextmanager
from functools import partial
from importlib import resources as package_files
from typing import Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from ..resources.layout import PRESENCE_SECONDS
from ..resources.registry import CANARY, CHALLENGER, CHAMPION
from ..settings import Serving, Settings
from .log import FeedbackLog, LogUnavailable, UnknownResponse, new_response_id
from .routing import in_canary
from .shadow import Shadow

log = logging.getLogger("rmi.serve")
ROUTES = ("/v1/answers", "/v1/completions", "/v1/feedback", "/v1/flush", "/v1/shadow", "/healthz", "/readyz",
          "/metrics", "/")
OPEN = ("/", "/healthz", "/readyz", "/metrics")  # read-only, and what probes and scrapers call without a key


class AnswersRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Questions for the model, answered in order.")
    user_id: str = Field(min_length=1, max_length=200, description="Who asks: stored with each answer.")


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    response_id: str = Field(min_length=1, max_length=100, description="From the answer the feedback is about.")
    rating: Literal["up", "down"]
    correction: str | None = Field(default=None, description="The answer that would have been right.")
    comment: str | None = None
    source: Literal["user", "report"] = Field(default="user", description="report: an automated check.")
    user_id: str | None = Field(default=None, max_length=200, description="Who reacts; default who asked.")
    meta: dict[str, str | int | bool] = Field(default_factory=dict, max_length=16)
    event_id: str | None = Field(default=None, min_length=1, max_length=100, description="The client's own id "
                                 "for this feedback: a retry with the same id lands once.")


class CompletionsRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI clients send options this gateway does not use
    prompt: str | list[str]
    model: str | None = None
    user: str | None = None


class Gateway:
    """What the routes share: the followed model, the batcher, the log, the metrics and the limits."""

    def __init__(self, settings: Settings, alias: str):
        from ..recipes.base import load_recipe
        from ..resources import build_resources, layout
        from .batching import Batcher
        from .metrics import Metrics
        from .models import FollowedModel

        self.config: Serving = settings.serving
        self.model_name, self.alias = settings.model_name, alias
        self.recipe = load_recipe(settings.recipe)
        import torch

        torch.set_num_threads(self.config.threads)
        resources = build_resources(settings)
        storage = resources["storage"]
        self.write_batch = lambda name, data: storage.write_bytes(layout.incoming(name), data)
        name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.presence = Presence(storage, layout.gateway(name), alias, self.config.canary_share)
        registry = resources["registry"]
        self.model = FollowedModel(registry, self.recipe, alias, self.config.reload_seconds)
        # the gateway of the champion also answers a share of users with the canary while one is on trial
        self.canary = (FollowedModel(registry, self.recipe, CANARY, self.config.reload_seconds, drop_when_gone=True)
                       if alias == CHAMPION and self.config.canary_share > 0 else None)
        self.shadow = (Shadow(FollowedModel(registry, self.recipe, CHALLENGER, self.config.reload_seconds,
                                            drop_when_gone=True), self.recipe) if self.config.shadow else None)
        self.log = FeedbackLog(self.config.log_path, max_bytes=self.config.log_max_bytes,
                               window_seconds=self.config.feedback_window_seconds)
        self.metrics = Metrics(self)
        self.batchers = {arm: Batcher(partial(self._forward, followed), partial(self._record, arm),
                                      self.config.max_batch, self.config.max_wait_ms)
                         for arm, followed in ((alias, self.model), (CANARY, self.canary)) if followed}
        self.limiter = RateLimiter(self.config.rate_limit)

    @property
    def followed(self) -> list:
        return [m for m in (self.model, self.canary, self.shadow and self.shadow.followed) if m]

    def _forward(self, followed, prompts: list[str]) -> tuple[str, list[str]]:
        loaded = followed.current  # held for the whole batch: a swap meanwhile changes the next batch only
        if loaded is None:
            raise NotReady()
        return loaded.version, self.recipe.answer(loaded.model, prompts)

    def arm(self, user_id: str) -> str:
        """The canary for its share of users while one is loaded, else the gateway's own alias."""
        canary = self.canary.current if self.canary else None
        if canary and in_canary(user_id, canary.version, self.config.canary_share):
            return CANARY
        return self.alias

    async def answer(self, prompts: list[str], user_id: str) -> list[dict]:
        arm = self.arm(user_id)
        try:
            return await self.batchers[arm].answer(prompts, user_id)
        except NotReady:
            if arm == self.alias:
                raise
            return await self.batchers[self.alias].answer(prompts, user_id)  # the canary ended meanwhile

    async def _record(self, arm: str, batch, version: str, completions: list[str]) -> list[list[dict]]:
        """A batch's answers, each with a response id, committed to the log in one go before anyone sees them
        (so that feedback on them finds them, even after a restart)."""
        self.metrics.batch.observe(len(completions))
        done, answers = iter(completions), []
        for item in batch:
            answers.append([{"response_id": new_response_id(), "completion": next(done), "model_version": version,
                             "prompt": p, "user_id": item.context, "arm": arm, "skill": self._skill(p)}
                            for p in item.prompts])
        await asyncio.wrap_future(self.log.record_answers([a for share in answers for a in share]))
        if self.shadow and arm == self.alias:  # after the answers are safe: the shadow never delays them
            self.shadow.submit(version, [p for item in batch for p in item.prompts], completions)
        return answers

    def _skill(self, prompt: str) -> str | None:
        return self.recipe.slice_of(prompt)[0] if self.recipe.is_valid_prompt(prompt) else None

    async def flush(self) -> list[str]:
        names = await asyncio.to_thread(self.log.flush, self.write_batch)
        for name in names:
            log.info("wrote feedback batch %s", name)
        self.metrics.flushed.inc(len(names))
        return names

    async def keep_flushing(self) -> None:
        """Write a batch file when enough events are logged, or when the oldest has waited long enough; and say
        every PRESENCE_SECONDS that this gateway serves."""
        waiting_since = None  # when the flusher first saw the events now pending
        while True:
            await asyncio.sleep(min(1.0, self.config.flush_seconds))
            await asyncio.to_thread(self.presence.beat)
            try:
                pending = await asyncio.to_thread(self.log.pending)
                waiting_since = (waiting_since or time.monotonic()) if pending else None
                if pending >= self.config.flush_events or (
                        pending and time.monotonic() - waiting_since >= self.config.flush_seconds):
                    await self.flush()
                    waiting_since = None
            except Exception as exc:  # noqa: BLE001 - the store out of reach: events stay in the log, retried
                log.warning("could not write a feedback batch (kept in the log, retried): %s", str(exc)[:300])


class NotReady(Exception):
    pass


class Presence:
    """A small file in the object store (layout.gateway), rewritten every PRESENCE_SECONDS while the gateway runs
    and removed when it stops: how the pipeline knows a canary would get users (RMI_PROMOTION=auto)."""

    def __init__(self, storage, key: str, alias: str, canary_share: float):
        self.storage, self.key, self.alias, self.canary_share = storage, key, alias, canary_share
        self.last = 0.0

    def beat(self) -> None:
        if time.monotonic() - self.last < PRESENCE_SECONDS:
            return
        try:
            self.storage.write_json(self.key, {"alias": self.alias, "canary_share": self.canary_share,
                                               "at": time.time()})
            self.last = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the store out of reach: answering goes on
            log.warning("could not say this gateway serves (%s); retried", str(exc)[:200])

    def leave(self) -> None:
        try:
            self.storage.delete(self.key)
        except Exception:  # noqa: BLE001 - a stale file ages out on its own
            pass


class RateLimiter:
    """A token bucket per API key: `rate` requests a second, bursts of twice that."""

    def __init__(self, rate: float):
        self.rate, self.burst = rate, 2 * rate
        self.buckets: dict[str, tuple[float, float]] = {}

    def allow(self, key_id: str) -> bool:
        if self.rate <= 0:
            return True
        now = time.monotonic()
        tokens, at = self.buckets.get(key_id, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1:
            self.buckets[key_id] = (tokens, now)
            return False
        self.buckets[key_id] = (tokens - 1, now)
        return True


def build_app(settings: Settings, alias: str = "champion") -> FastAPI:
    gateway = Gateway(settings, alias)
    config = gateway.config

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for followed in gateway.followed:
            await asyncio.to_thread(followed.start)
        import gc

        gc.freeze()  # what start-up made lives on: collections stop rescanning it (long pauses under load)
        for batcher in gateway.batchers.values():
            batcher.start()
        await asyncio.to_thread(gateway.presence.beat)
        flusher = asyncio.get_running_loop().create_task(gateway.keep_flushing())
        log.info("gateway ready to answer with %s@%s", gateway.model_name, alias) if gateway.model.current else \
            log.warning("no version has the alias %s yet: /readyz says 503 until one does", alias)
        yield
        flusher.cancel()
        await asyncio.to_thread(gateway.presence.leave)
        for batcher in gateway.batchers.values():
            await batcher.stop()
        for followed in gateway.followed:
            followed.stop()
        if gateway.shadow:
            gateway.shadow.stop()
        try:
            await gateway.flush()
        except Exception as exc:  # noqa: BLE001 - kept in the log: the next start writes it
            log.warning("feedback left in the log at shutdown (written at the next start): %s", str(exc)[:300])
        gateway.log.close()

    # FastAPI's own OpenTelemetry hooks are off: /metrics is ours, and request bodies must not reach a log
    app = FastAPI(title="rmi serve", version=_version(), lifespan=lifespan,
                  telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
                  description="Answers from the champion, and the feedback that trains its successor.")
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"])

    async def authorized(request: Request) -> None:  # async: a sync one would cost a thread hop a request
        header = request.headers.get("authorization", "")
        given = header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        matches = [hmac.compare_digest(given.encode(), key.encode()) for key in config.api_keys]  # each, always
        if not given or not any(matches):
            raise HTTPException(401, "a valid API key is required (header 'Authorization: Bearer KEY')")
        if not gateway.limiter.allow(hashlib.sha256(given.encode()).hexdigest()[:16]):
            raise HTTPException(429, f"more than {config.rate_limit:g} requests a second with this key",
                                headers={"Retry-After": "1"})

    guarded = [Depends(authorized)] if config.api_keys else []  # no keys: no per-request dependency to solve

    def bounded(field: str, text: str | None) -> None:
        if text is not None and len(text) > config.max_text_chars:
            raise HTTPException(413, f"{field} is longer than {config.max_text_chars} characters")

    async def answered(prompts: list[str], user_id: str) -> list[dict]:
        if len(prompts) > config.max_prompts:
            raise HTTPException(413, f"at most {config.max_prompts} prompts in one request, got {len(prompts)}")
        for i, prompt in enumerate(prompts):
            bounded(f"prompts[{i}]", prompt)
        bounded("user_id", user_id)
        try:
            answers = await gateway.answer(prompts, user_id)
        except NotReady:
            raise HTTPException(503, f"no model to answer with yet: no version of {gateway.model_name!r} has "
                                f"the alias {alias!r}") from None
        except LogUnavailable as exc:
            raise HTTPException(503, f"{exc}: the answer could not be recorded, so it was not given") from None
        gateway.metrics.prompts.inc(len(prompts))
        return answers

    @app.post("/v1/answers", dependencies=guarded, summary="Answers from the served model")
    async def answers(body: AnswersRequest) -> dict:
        got = await answered(body.prompts, body.user_id)
        return {"answers": [{k: a[k] for k in ("response_id", "completion", "model_version")} for a in got]}

    @app.post("/v1/completions", dependencies=guarded, summary="OpenAI-compatible completions")
    async def completions(body: CompletionsRequest) -> dict:
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if not prompts:
            raise HTTPException(422, "prompt must not be empty")
        got = await answered(prompts, body.user or "openai-client")
        return {"id": got[0]["response_id"], "object": "text_completion", "created": int(time.time()),
                "model": f"{gateway.model_name}/{got[0]['model_version']}",
                "choices": [{"index": i, "text": a["completion"], "logprobs": None, "finish_reason": "stop",
                             "response_id": a["response_id"], "model_version": a["model_version"]}
                            for i, a in enumerate(got)],
                # the recipe decodes with its own tokens: usage counts characters
                "usage": {"prompt_tokens": sum(map(len, prompts)),
                          "completion_tokens": sum(len(a["completion"]) for a in got),
                          "total_tokens": sum(map(len, prompts)) + sum(len(a["completion"]) for a in got)}}

    @app.post("/v1/feedback", status_code=202, dependencies=guarded,
              summary="A rating of an answer; 202 once it is durable")
    async def feedback(body: FeedbackRequest) -> dict:
        bounded("correction", body.correction)
        bounded("comment", body.comment)
        for key, value in body.meta.items():
            bounded(f"meta.{key}", str(value))
        try:
            event_id = await asyncio.wrap_future(gateway.log.record_feedback(
                body.response_id, body.rating, body.correction, body.comment, body.source, body.user_id,
                body.meta, body.event_id))
        except UnknownResponse as exc:
            raise HTTPException(404, str(exc)) from None
        except LogUnavailable as exc:
            raise HTTPException(503, f"{exc}: the feedback was not recorded; send it again later") from None
        gateway.metrics.feedback.labels(body.rating).inc()
        return {"event_id": event_id, "status": "recorded"}

    @app.post("/v1/flush", dependencies=guarded, summary="Write logged events into batch files now")
    async def flush() -> dict:
        try:
            names = await gateway.flush()
        except Exception as exc:  # noqa: BLE001 - the store out of reach
            raise HTTPException(503, f"could not write a feedback batch (kept in the log): {str(exc)[:200]}") \
                from None
        return {"batches": names}

    @app.get("/v1/shadow", dependencies=guarded, summary="The challenger in shadow: agreement, reward, latency")
    async def shadow() -> dict:
        if gateway.shadow is None:
            raise HTTPException(404, "shadow mode is off (RMI_SHADOW=true turns it on)")
        return gateway.shadow.report()

    @app.get("/healthz", summary="The process answers")
    async def healthz() -> dict:
        return {"ok": True}

    @app.get("/readyz", summary="Ready once a model is loaded")
    async def readyz() -> Response:
        loaded = gateway.model.current
        if loaded is None:
            return JSONResponse({"ready": False, "alias": alias, "reason": gateway.model.last_error or
                                 f"no version of {gateway.model_name!r} has the alias {alias!r} yet"}, 503)
        canary = gateway.canary.current if gateway.canary else None
        return JSONResponse({"ready": True, "alias": alias, "model_version": loaded.version,
                             **({"canary_version": canary.version} if canary else {})})

    @app.get("/metrics", summary="Prometheus text format")
    async def metrics() -> Response:
        return Response(await asyncio.to_thread(gateway.metrics.render), media_type=gateway.metrics.content_type)

    chat_page = package_files.files(__package__).joinpath("page.html").read_text()  # read once, not per visit

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> str:
        return chat_page

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [{"field": ".".join(str(p) for p in e["loc"] if p != "body") or "body", "problem": e["msg"]}
                  for e in exc.errors()]
        return JSONResponse({"error": "the request body is not valid: " + "; ".join(
            f"{f['field']}: {f['problem']}" for f in fields[:5]), "fields": fields}, 422)

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request to %s failed", request.url.path)  # the trace stays in the server's log
        return JSONResponse({"error": "the gateway failed to handle this request; it is in the gateway's log"}, 500)

    return FrontDoor(app, config.max_body_bytes, gateway.metrics)


class FrontDoor:
    """ASGI wrapper: bodies over the limit get 413 before anything reads them; every request is counted and timed."""

    def __init__(self, app, max_body_bytes: int, metrics):
        self.app, self.max_body_bytes, self.metrics = app, max_body_bytes, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in ROUTES else "other"
        started, status = time.perf_counter(), {"code": 500}

        async def counted(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            body = await self._read(receive)
            if body is None:
                return await _json(counted, 413, {"error": f"the request body is larger than "
                                                  f"{self.max_body_bytes} bytes"})
            replayed = False

            async def replay():
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            await self.app(scope, replay, counted)
        finally:
            self.metrics.requests.labels(route, str(status["code"])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)

    async def _read(self, receive) -> bytes | None:
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)


async def _json(send, status: int, payload: dict) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def _version() -> str:
    from .. import __version__

    return __version__
