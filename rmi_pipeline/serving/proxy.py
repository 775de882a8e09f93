"""`rmi serve --upstream URL`: the gateway in front of an engine that answers (vLLM, SGLang, TGI, llama.cpp, Ollama).

It routes as the gateway does: the champion, the canary for its share of users (routing.in_canary), the challenger
in shadow; each arm to the engine's name for its model (RMI_SERVE_UPSTREAM_*_MODEL, or with
RMI_SERVE_UPSTREAM_LOAD_ADAPTERS the adapter it had the engine load, adapters.py). It loads no model itself: it
follows the registry's aliases (models.FollowedModel), and each answer records the version behind its arm's alias,
a response id that /v1/feedback takes, and who asked, in the feedback log before the client has it. A stream is
passed on chunk by chunk as the engine writes it and recorded before its `data: [DONE]`; feedback on an answer
still streaming waits until it is recorded (ProxyLog), so it always finds it.

It starts taking feedback at once and answers once it has read the registry and loaded the recipe, in the
background (`start`): a restarted gateway never keeps feedback waiting on a model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextlib import suppress
from functools import partial

from fastapi.responses import StreamingResponse

from ..recipes.completion import plain_prompt
from ..resources.registry import CANARY, CHALLENGER
from ..settings import Settings
from .errors import Refused
from .gateway import Gateway, NotReady
from .log import FeedbackLog, LogUnavailable, new_response_id
from .models import FollowedModel
from .options import REFUSED
from .shadow import Shadow
from .streaming import DONE, MEDIA_TYPE
from .upstream import Engine, EngineFailed, Stream

log = logging.getLogger("rmi.serve")
# what makes an answer something other than text after its prompt: refused, since it could not be recorded as one
NOT_TEXT = ("tools", "functions", "tool_choice", "function_call", "audio", "modalities", "echo", "suffix")
# a request that sets nothing but these asks for the champion's own plain answers: the shadow compares those
PLAIN = {"model", "prompt", "user", "n", "stream", "stream_options"}


class EngineModel(FollowedModel):
    """The version behind an alias, followed as it moves; `current.model` is the engine's name for it."""

    def __init__(self, registry, alias: str, reload_seconds: float, name: Callable[[object, object], str],
                 **kwargs):
        super().__init__(registry, None, alias, reload_seconds, **kwargs)
        self.name = name

    def load(self, mv) -> str:
        return self.name(self.registry, mv)


class ProxyLog(FeedbackLog):
    """The feedback log, where feedback on an answer that is still streaming waits until the answer is recorded
    (or, the stream failing, finds no answer: 404)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.streaming: dict[str, Future] = {}  # response id -> settled once its stream recorded or failed

    def record_feedback(self, response_id: str, *args, **kwargs) -> Future:
        streaming = self.streaming.get(response_id)
        if streaming is None:
            return super().record_feedback(response_id, *args, **kwargs)
        recorded: Future = Future()

        def then(_):
            chained = super(ProxyLog, self).record_feedback(response_id, *args, **kwargs)
            chained.add_done_callback(lambda f: recorded.set_exception(f.exception()) if f.exception() else
                                      recorded.set_result(f.result()))

        streaming.add_done_callback(then)
        return recorded

    def announce(self, response_ids: list[str]) -> Future:
        """Say these answers are streaming; settle the future once they are recorded, or will never be."""
        settled: Future = Future()
        for response_id in response_ids:
            self.streaming[response_id] = settled
        return settled

    def settle(self, response_ids: list[str], settled: Future) -> None:
        for response_id in response_ids:
            self.streaming.pop(response_id, None)
        if not settled.done():
            settled.set_result(None)


class EngineShadow(Shadow):
    """The challenger in shadow, asked through the engine under its name (greedy, whole answers)."""

    def __init__(self, followed, engine: Engine):
        super().__init__(followed, None)  # the recipe arrives with the proxy's warm-up, before any answer
        self.engine = engine

    def completions(self, loaded, prompts: list[str]) -> list[str]:
        reply = json.loads(self.engine.call("completions", {"model": loaded.model, "prompt": prompts,
                                                           "temperature": 0.0}))
        return [c["text"] for c in sorted(reply["choices"], key=lambda c: c["index"])]


class Proxy(Gateway):
    """The gateway of `alias` in front of the engine at RMI_SERVE_UPSTREAM_URL."""

    log_type = ProxyLog

    def __init__(self, settings: Settings, alias: str):
        config = settings.upstream
        self.settings, self.upstream = settings, Engine(config)
        self.names = {alias: config.champion_model, CANARY: config.canary_model, CHALLENGER: config.challenger_model}
        self.adapters = None
        if config.load_adapters:
            from .adapters import Adapters

            folder = config.adapter_dir or settings.resolved_home / "serve" / "adapters"
            folder.mkdir(parents=True, exist_ok=True)
            self.adapters = Adapters(self.upstream, settings.model_name, folder, config.engine_adapter_dir,
                                     config.timeout_seconds, self._in_use)
        self.warmed = threading.Event()  # the recipe is loaded (or failed to: then `recipe` stays None)
        self._stopping = False
        super().__init__(settings, alias)
        self.batchers = {}  # the engine answers

    def _recipe(self, settings: Settings):
        return None  # loaded in the background by `start`: feedback is taken meanwhile

    def _follow(self, registry, alias: str, **kwargs) -> EngineModel:
        return EngineModel(registry, alias, self.config.reload_seconds, partial(self._engine_name, alias), **kwargs)

    def _engine_name(self, alias: str, registry, mv) -> str:
        return self.adapters.load(registry, str(mv.version)) if self.adapters else self.names[alias]

    def _in_use(self) -> set[str]:
        return {f.current.model for f in self.followed if f.current}

    def _shadow(self, followed) -> EngineShadow:
        return EngineShadow(followed, self.upstream)

    async def start(self) -> None:
        """Take feedback now; load the recipe and read the registry in the background, then answer."""
        await asyncio.to_thread(self.heartbeat.beat)
        self._flusher = asyncio.get_running_loop().create_task(self.keep_flushing())
        threading.Thread(target=self._warm_up, name="warm-up", daemon=True).start()
        log.info("gateway in front of the engine at %s: taking feedback; answering once the registry is read",
                 self.upstream.where)

    def _warm_up(self) -> None:
        from ..recipes.base import load_recipe

        try:
            self.recipe = load_recipe(self.settings.recipe)
            if self.shadow:
                self.shadow.recipe = self.recipe
        except Exception:  # noqa: BLE001 - said in the log; the gateway takes feedback, and never answers
            log.exception("could not load the recipe %s: the gateway will not answer", self.settings.recipe)
        finally:
            self.warmed.set()
        # the champion last: once it answers, the canary and challenger have been looked for too
        for followed in reversed(self.followed):
            if not self._stopping and self.recipe is not None:
                followed.start()
        if self.model.current:
            log.info("answering with %s@%s v%s through the engine", self.model_name, self.alias,
                     self.model.current.version)

    async def stop(self) -> None:
        self._stopping = True
        if self.adapters:
            self.adapters.stop()
        await super().stop()
        await self.upstream.close()

    async def flush(self) -> list[str]:
        """As the gateway's, once the recipe is loaded: redaction asks it which prompts are its own."""
        await asyncio.to_thread(self.warmed.wait)
        if self.recipe is None:
            raise RuntimeError("the recipe could not be loaded (see the log above): events stay in the log")
        return await super().flush()

    # -- answering through the engine -----------------------------------------------------------------------------
    def route(self, user_id: str, pinned: str | None):
        """(arm, what it answers with now: Loaded, its `model` the engine's name), or NotReady."""
        if self.recipe is None:
            raise NotReady()
        arm = pinned or self.arm(user_id)
        loaded = self.followed_by(arm).current
        if loaded is None and arm != self.alias and not pinned:  # the canary ended meanwhile
            arm, loaded = self.alias, self.model.current
        if loaded is None:
            raise NotReady()
        return arm, loaded

    def decoding(self, temperature: float | None, seed: int | None) -> tuple[dict, dict | None]:
        """(what to set in the engine's request, how the answers are sampled: None for greedy). Where the request
        leaves the temperature to the gateway, greedy but for RMI_SERVE_EXPLORE_SHARE of requests, as for its own
        answers; a sampled request gets a seed drawn here where it set none, so each answer records one."""
        if temperature is None:
            if self.explore.random() >= self.config.explore_share:
                return {"temperature": 0.0}, None
            temperature = self.config.explore_temperature
        if temperature == 0:
            return {"temperature": 0.0}, None
        seed = self.explore.randrange(2**31) if seed is None else seed
        return {"temperature": temperature, "seed": seed}, {"temperature": temperature, "seed": seed}

    def check_options(self, body, prompts: int) -> None:
        """400 for an option whose answer is not text after its prompt, or more answers than one request may ask."""
        extra = body.model_extra or {}
        for name in NOT_TEXT:
            if name in extra and extra[name] not in REFUSED[name][0]:
                raise Refused(400, f"{name}: the gateway records each answer as text after its prompt, which an "
                              "answer to this option is not", param=name, code="unsupported_option")
        if prompts * body.n > self.config.max_prompts:
            raise Refused(400, f"n: {prompts} prompt(s) x n={body.n} answers is more than the "
                          f"{self.config.max_prompts} one request may ask for (RMI_SERVE_MAX_PROMPTS)", param="n",
                          code="too_many_answers")

    def _asked(self, path: str, body, prompts: list[str], pinned: str | None) -> Asking:
        arm, loaded = self.route(body.user_id, pinned)
        decoding, sampling = self.decoding(body.temperature, body.seed)
        payload = {**body.model_dump(exclude_unset=True), **decoding, "model": loaded.model}
        plain = sampling is None and set(body.model_fields_set | set(body.model_extra or {})) <= PLAIN
        return Asking(self, path, payload, prompts, body.n, body.user_id, arm, loaded, sampling, plain)

    async def reply(self, path: str, body, prompts: list[str], pinned: str | None) -> dict:
        """The engine's reply to `body` (an OpenAI request of `prompts`), its answers recorded."""
        asking = self._asked(path, body, prompts, pinned)
        reply = await self.upstream.reply(path, asking.payload)
        choices = reply.get("choices")
        if not isinstance(choices, list) or sorted(_index(c, asking.count) for c in choices) != list(
                range(asking.count)):
            raise EngineFailed(f"the engine's reply does not hold {asking.count} choices")
        texts, cuts = [""] * asking.count, [False] * asking.count
        for choice in choices:
            texts[choice["index"]], cuts[choice["index"]] = _text(choice, whole=True), asking.cut(choice)
        await asking.record(texts, cuts)
        reply["id"] = asking.ids[0]
        for choice in choices:
            choice.update(asking.mine(choice["index"]))
        return reply

    async def stream(self, path: str, body, prompts: list[str], pinned: str | None) -> StreamingResponse:
        """The engine's stream for `body`, passed on chunk by chunk with the gateway's response ids, its answers
        recorded before `data: [DONE]` (EngineFailed before the first chunk where the engine fails at once)."""
        asking = self._asked(path, body, prompts, pinned)
        stream = await self.upstream.stream(path, asking.payload)
        return StreamingResponse(asking.relay(stream), media_type=MEDIA_TYPE,
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class Asking:
    """One request on its way through the engine: its answers' response ids (one per choice), and what each is
    recorded with."""

    def __init__(self, proxy: Proxy, path: str, payload: dict, prompts: list[str], n: int, user_id: str, arm: str,
                 loaded, sampling: dict | None, plain: bool):
        self.proxy, self.path, self.payload, self.prompts, self.n = proxy, path, payload, prompts, n
        self.user_id, self.arm, self.version, self.sampling, self.plain = user_id, arm, loaded.version, sampling, plain
        self.count = len(prompts) * n
        self.ids = [new_response_id() for _ in range(self.count)]
        self.limited = any(payload.get(k) is not None for k in ("max_tokens", "max_completion_tokens"))

    def cut(self, choice: dict) -> bool:
        """Whether the client's options ended this choice before the model did: its max_tokens (finish_reason
        "length" where the request set one) or a stop text (vLLM names it in `stop_reason`; other engines do not
        say whether a stop text or the end token ended a choice, so theirs count as whole)."""
        return (choice.get("finish_reason") == "length" and self.limited) or isinstance(choice.get("stop_reason"), str)

    def mine(self, index: int) -> dict:
        return {"response_id": self.ids[index], "model_version": self.version}

    async def record(self, texts: list[str], cuts: list[bool]) -> None:
        """Each choice an answer in the log (the engine orders choices prompt by prompt, n each), committed before
        the client has any of them; then, plain greedy completions, to the shadow."""
        proxy = self.proxy
        answers = [{"response_id": rid, "completion": text, "sampling": self.sampling, "model_version": self.version,
                    "prompt": self.prompts[i // self.n], "user_id": self.user_id, "arm": self.arm,
                    "skill": proxy._skill(self.prompts[i // self.n]), "cut": cut}
                   for i, (rid, text, cut) in enumerate(zip(self.ids, texts, cuts, strict=True))]
        await asyncio.wrap_future(proxy.log.record_answers(answers))
        proxy.metrics.prompts.inc(len(self.prompts))
        if proxy.shadow and self.plain and self.arm == proxy.alias and self.path == "completions":
            proxy.shadow.submit(self.version, [a["prompt"] for a in answers], texts)

    async def relay(self, stream: Stream) -> AsyncIterator[bytes]:
        """The engine's chunks with this gateway's ids; the answers recorded before `data: [DONE]`. A failure past
        the first chunk (the engine's, or the log's) ends the stream with an error event instead, and nothing is
        recorded; nor is anything when the client leaves before the end."""
        log_ = self.proxy.log
        settled = log_.announce(self.ids)
        texts: list[list[str] | None] = [None] * self.count
        cuts = [False] * self.count
        try:
            async for chunk in stream.chunks():
                for choice in _choices(chunk, self.count):
                    texts[choice["index"]] = texts[choice["index"]] or []
                    texts[choice["index"]].append(_text(choice, whole=False))
                    cuts[choice["index"]] = cuts[choice["index"]] or self.cut(choice)
                    choice.update(self.mine(choice["index"]))
                chunk["id"] = self.ids[0]
                yield b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
            if None in texts:
                raise EngineFailed(f"the engine's stream does not hold {self.count} choices")
            await self.record(["".join(t) for t in texts], cuts)
            log_.settle(self.ids, settled)  # feedback waiting on these answers goes ahead
            yield DONE
        except Exception as exc:  # noqa: BLE001 - the status is sent: the client learns it from an error event
            if not isinstance(exc, EngineFailed | LogUnavailable):
                log.exception("relaying the engine's stream failed")
            message = (f"{exc}: the answer could not be recorded, so it was not completed"
                       if isinstance(exc, LogUnavailable) else f"{exc}" if isinstance(exc, EngineFailed) else
                       "the gateway failed to relay the engine's stream; it is in the gateway's log")
            yield b"data: " + json.dumps({"error": {"message": message, "type": "server_error", "param": None,
                                                    "code": "upstream_failed"}}).encode() + b"\n\n"
        finally:
            log_.settle(self.ids, settled)
            with suppress(Exception):
                await stream.close()


def _index(choice, count: int) -> int:
    index = choice.get("index") if isinstance(choice, dict) else None
    if not isinstance(index, int) or not 0 <= index < count:
        raise EngineFailed("a choice in the engine's reply has no index of this request")
    return index


def _choices(chunk: dict, count: int) -> list[dict]:
    if "error" in chunk:  # an engine that fails mid-stream says so in an event (vLLM)
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise EngineFailed(f"the engine failed mid-stream: {str(message)[:300]}")
    choices = chunk.get("choices", [])
    if not isinstance(choices, list):
        raise EngineFailed("a chunk of the engine's stream is out of shape")
    for choice in choices:
        _index(choice, count)
    return choices


def _text(choice: dict, whole: bool) -> str:
    """A choice's text: a completion's `text`, a chat's message (whole) or delta (a chunk) `content`."""
    if "text" in choice:
        text = choice["text"]
    else:
        part = choice.get("message" if whole else "delta", None if whole else {})
        text = part.get("content") if isinstance(part, dict) else None
        text = "" if text is None and isinstance(part, dict) else text  # a chunk of the role, a refusal
    if not isinstance(text, str):
        raise EngineFailed("a choice in the engine's reply has no text")
    return text


def chat_prompt(messages) -> str:
    """What a chat is recorded as: the engine renders it with its own template, which this gateway does not have,
    so the prompt is its plain rendering, the last message's text, which must be the user's (recipes/completion.py)."""
    return plain_prompt([{"role": m.role, "content": m.text()} for m in messages])
