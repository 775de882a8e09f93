"""What one caller may ask of the gateway, so that no one holds the batch, the log or the server for everyone.

A body over RMI_SERVE_MAX_BODY_BYTES is refused (413) before anything reads it; a request with too many prompts or
too long a text is refused (413) before it is answered or recorded; an API key past its rate gets 429.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from fastapi import HTTPException

from .errors import shaped


class RateLimiter:
    """A token bucket per API key: `rate` requests a second, bursts of twice that; 0: no limit."""

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

    def check(self, key_id: str) -> None:
        if not self.allow(key_id):
            raise HTTPException(429, f"more than {self.rate:g} requests a second with this key",
                                headers={"Retry-After": "1"})


@dataclass(frozen=True)
class RequestLimits:
    """At most `max_prompts` prompts in a request and `max_text_chars` characters in any text of it (413)."""

    max_prompts: int
    max_text_chars: int

    def check_prompts(self, prompts: list[str], user_id: str) -> None:
        if len(prompts) > self.max_prompts:
            raise HTTPException(413, f"at most {self.max_prompts} prompts in one request, got {len(prompts)}")
        if max(map(len, prompts), default=0) > self.max_text_chars:  # a field's name only for a refusal
            i = next(i for i, prompt in enumerate(prompts) if len(prompt) > self.max_text_chars)
            self.check_text(f"prompts[{i}]", prompts[i])
        self.check_text("user_id", user_id)

    def check_text(self, field: str, text: str | None) -> None:
        if text is not None and len(text) > self.max_text_chars:
            raise HTTPException(413, f"{field} is longer than {self.max_text_chars} characters")


class BodySizeLimit:
    """ASGI middleware: a body over `max_body_bytes` gets 413 before any route reads it (a JSON parser would hold
    all of it in memory first); a smaller one is read once and handed on whole."""

    def __init__(self, app, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body = await self._read(receive)
        if body is None:
            return await _json(send, 413, shaped(scope["path"], 413, f"the request body is larger than "
                                                 f"{self.max_body_bytes} bytes", code="body_too_large"))
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:  # what comes after the body (a disconnect) from the server itself
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

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
