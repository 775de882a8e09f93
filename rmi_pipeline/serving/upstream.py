"""The engine behind `rmi serve --upstream URL`: any OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, Ollama),
called over one pooled HTTP client. What is read from it is bounded in time (RMI_SERVE_UPSTREAM_TIMEOUT_SECONDS, for
a whole reply or stream) and size (RMI_SERVE_UPSTREAM_MAX_REPLY_BYTES, decoded). Its replies are data: never logged.
An engine that cannot be reached, fails, or answers out of OpenAI's shapes is EngineFailed (the client's 502); one
that refuses a request as malformed (400, 413, 422) is EngineRefused, passed on as a 400 with its reason.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx

from ..settings.serving import Upstream

ERROR_BYTES = 65_536  # of an error reply: enough for its message
DONE = "[DONE]"


class EngineFailed(Exception):
    """The engine could not be reached, failed, took too long, said too much, or answered out of shape."""


class EngineRefused(Exception):
    """The engine refused the request as a client's mistake (its 400, 413 or 422), with its reason."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class Engine:
    def __init__(self, config: Upstream):
        self.url, self.timeout, self.max_bytes = config.url, config.timeout_seconds, config.max_reply_bytes
        key = config.api_key.get_secret_value() if config.api_key else None
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client: httpx.AsyncClient | None = None

    @property
    def where(self) -> str:
        """The engine's address without any credentials in it, for a log line."""
        url = httpx.URL(self.url)
        return str(url.copy_with(username=None, password=None))

    def client(self) -> httpx.AsyncClient:
        if self._client is None:  # made in the serving loop, on first use
            self._client = httpx.AsyncClient(base_url=self.url + "/", headers=self.headers, timeout=self.timeout,
                                             limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def reply(self, path: str, body: dict) -> dict:
        """The engine's JSON reply to `body` posted at `path` (relative to the base URL)."""
        deadline = asyncio.get_running_loop().time() + self.timeout
        response = await self._send(path, body, deadline)
        try:
            return _object(await _read(response, deadline, self.max_bytes))
        finally:
            await response.aclose()

    async def stream(self, path: str, body: dict) -> Stream:
        """The engine's event stream for `body`, once it has answered 200 (else EngineFailed or EngineRefused)."""
        deadline = asyncio.get_running_loop().time() + self.timeout
        return Stream(await self._send(path, body, deadline), deadline, self.max_bytes)

    async def _send(self, path: str, body: dict, deadline: float) -> httpx.Response:
        client = self.client()
        try:
            response = await _within(client.send(client.build_request("POST", path, json=body), stream=True),
                                     deadline)
        except httpx.HTTPError as exc:
            raise EngineFailed(f"the engine could not be reached ({type(exc).__name__})") from None
        if response.status_code != 200:
            try:
                content = await _read(response, deadline, ERROR_BYTES)
            except EngineFailed:
                content = b""
            finally:
                await response.aclose()
            raise failure(response.status_code, content)
        return response

    def call(self, path: str, body: dict, timeout: float = 60.0) -> bytes:
        """POST `body` at `path` from a worker thread (adapters, the shadow); the reply's bytes (EngineFailed or
        EngineRefused where it is not a 200)."""
        try:
            with httpx.Client(base_url=self.url + "/", headers=self.headers, timeout=timeout) as client, \
                    client.stream("POST", path, json=body) as response:
                content, size = [], 0
                for part in response.iter_bytes():
                    size += len(part)
                    if size > self.max_bytes:
                        raise EngineFailed(f"the engine's reply is longer than {self.max_bytes} bytes")
                    content.append(part)
        except httpx.HTTPError as exc:
            raise EngineFailed(f"the engine could not be reached ({type(exc).__name__})") from None
        if response.status_code != 200:
            raise failure(response.status_code, b"".join(content)[:ERROR_BYTES])
        return b"".join(content)


class Stream:
    """An engine's server-sent events: `chunks()` yields each `data:` event's JSON object until `data: [DONE]`;
    a stream that ends without it, or says anything but JSON objects, is EngineFailed."""

    def __init__(self, response: httpx.Response, deadline: float, max_bytes: int):
        self.response, self.deadline, self.max_bytes = response, deadline, max_bytes

    async def chunks(self) -> AsyncIterator[dict]:
        data = []
        async for line in self._lines():
            if line.startswith(b"data:"):
                data.append(line[5:].strip())
            elif not line and data:  # a blank line ends an event
                payload, data = b"\n".join(data), []
                if payload == DONE.encode():
                    return
                yield _object(payload)
        raise EngineFailed("the engine's stream ended before data: [DONE]")

    async def _lines(self) -> AsyncIterator[bytes]:
        """The stream's lines, a blank one after the last: an engine that closes after `data: [DONE]` without one
        has ended its stream all the same."""
        parts, size, buffer = aiter(self.response.aiter_bytes()), 0, bytearray()
        while (part := await _within(anext(parts, None), self.deadline)) is not None:
            size += len(part)
            if size > self.max_bytes:
                raise EngineFailed(f"the engine's stream is longer than {self.max_bytes} bytes")
            buffer += part
            if b"\n" in part:
                *lines, rest = bytes(buffer).split(b"\n")
                buffer = bytearray(rest)
                for line in lines:
                    yield line.rstrip(b"\r")
        yield bytes(buffer).rstrip(b"\r")
        yield b""

    async def close(self) -> None:
        await self.response.aclose()


async def _within(awaitable, deadline: float):
    """`awaitable`'s result, or EngineFailed once the reply's deadline has passed."""
    try:
        return await asyncio.wait_for(awaitable, max(0.0, deadline - asyncio.get_running_loop().time()))
    except TimeoutError:
        raise EngineFailed("the engine took longer than RMI_SERVE_UPSTREAM_TIMEOUT_SECONDS") from None
    except httpx.HTTPError as exc:
        raise EngineFailed(f"the engine's reply broke off ({type(exc).__name__})") from None


async def _read(response: httpx.Response, deadline: float, limit: int) -> bytes:
    parts, size, chunks = aiter(response.aiter_bytes()), 0, []
    while (part := await _within(anext(parts, None), deadline)) is not None:
        size += len(part)
        if size > limit:
            raise EngineFailed(f"the engine's reply is longer than {limit} bytes")
        chunks.append(part)
    return b"".join(chunks)


def _object(content: bytes) -> dict:
    try:
        value = json.loads(content)
    except ValueError:
        raise EngineFailed("the engine's reply is not JSON") from None
    if not isinstance(value, dict):
        raise EngineFailed("the engine's reply is not a JSON object")
    return value


def failure(status: int, content: bytes) -> Exception:
    """What an engine's refusal means: the request's fault (400, 413, 422: its reason, passed on), else the
    engine's."""
    if status in (400, 413, 422):
        message, param = _reason(content)
        return EngineRefused(f"the engine refused the request: {message}", param)
    return EngineFailed(f"the engine answered {status}")


def _reason(content: bytes) -> tuple[str, str | None]:
    """The message (cut to 300 characters) and param of an error reply in OpenAI's shape, or in FastAPI's."""
    try:
        value = json.loads(content)
    except ValueError:
        return "(no reason given)", None
    error = value.get("error", value) if isinstance(value, dict) else value
    if isinstance(error, dict):
        message, param = error.get("message") or error.get("detail"), error.get("param")
    else:
        message, param = error, None
    text = message if isinstance(message, str) else json.dumps(message)[:300] if message else "(no reason given)"
    return text[:300], param if isinstance(param, str) else None
