"""The simulated world's judge: a real OpenAI-compatible chat server that grades answers against the truth, with a
known error rate and a length bias, so that the pipeline's judge calibration has something real to find.

    python -m rmi_pipeline.world.judge --port 8100 --error-rate 0.1 --length-bias 0.3 --seed 0

It answers `POST /v1/chat/completions` in the grading protocol of rmi_pipeline/scoring/judge.py (the sections
`## Question`, `## Reference answer`, `## Answer to grade`, `## Criteria` in the user message; a JSON reply with one
verdict per criterion) and `GET /v1/models`; `GET /stats` counts what it did, for tests. The truth is a matcher
`(question, reference, answer) -> bool` (default: the reference's normalized words appear in the answer; a world
names another with --matcher module:function). Every criterion gets the answer's one verdict. Verdicts are a hash
of the request and the seed, so the same request gets the same verdict; faults (a stall past the client's timeout,
non-JSON, "pass": 2, HTTP 500) are drawn per attempt, so a retry can succeed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import importlib
import json
import os
import re
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

Matcher = Callable[[str, str | None, str], bool]
LONG_BY_WORDS = 3  # an answer this many words longer than the reference is "long" to a length-biased judge
KEY_VARIABLE = "RMI_WORLD_JUDGE_API_KEY"
FAULTS = ("timeout", "http_error", "non_json", "out_of_range")
_SECTIONS = re.compile(r"\A## Question\n(?P<question>.*?)\n## Reference answer\n(?P<reference>.*?)\n"
                       r"## Answer to grade\n(?P<answer>.*)\n## Criteria\n(?P<criteria>.*)\Z", re.S)


def _plain(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(ch if not unicodedata.category(ch).startswith("P") else " " for ch in text)
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def reference_in_answer(question: str, reference: str | None, answer: str) -> bool:
    """The default truth: the reference's words, in order, appear in the answer once case, punctuation and
    articles are set aside; no reference, no pass."""
    if reference is None or not _plain(reference):
        return False
    return f" {_plain(reference)} " in f" {_plain(answer)} "


def load_matcher(path: str) -> Matcher:
    """A matcher named 'module:function' (how a world brings its own truth, such as a catalogue lookup)."""
    module, _, name = path.partition(":")
    matcher = getattr(importlib.import_module(module), name, None)
    if not callable(matcher):
        raise SystemExit(f"--matcher {path!r}: {module!r} has no function {name!r}")
    return matcher


def _draw(*parts: object) -> float:
    """A uniform number in [0, 1) from a hash of the parts: the same request and seed draw the same number."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


@dataclass
class Knobs:
    """How the world's judge errs: verdicts flipped at `error_rate`; a long wrong answer passed with the extra
    probability `length_bias`; the shares of attempts that fault; seconds a stall lasts and every answer takes."""

    error_rate: float = 0.0
    length_bias: float = 0.0
    seed: int = 0
    timeout_share: float = 0.0
    http_error_share: float = 0.0
    non_json_share: float = 0.0
    out_of_range_share: float = 0.0
    stall_seconds: float = 300.0
    delay_seconds: float = 0.0
    api_key: str | None = field(default=None, repr=False)
    model: str = "judge"

    def __post_init__(self):
        for name in ("error_rate", "length_bias", *(f"{f}_share" for f in FAULTS)):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], not {getattr(self, name)}")
        if sum(getattr(self, f"{f}_share") for f in FAULTS) > 1.0:
            raise ValueError("the fault shares add up to more than 1")

    @property
    def faulty(self) -> bool:
        return any(getattr(self, f"{f}_share") for f in FAULTS)


def build_app(knobs: Knobs | None = None, matcher: Matcher = reference_in_answer):
    """The judge as a FastAPI app; its counts live in `app.state.stats`."""
    knobs = knobs or Knobs()
    app = FastAPI(title="rmi world judge", docs_url=None, redoc_url=None, openapi_url=None)
    stats = {"requests": 0, "graded": 0, "passed": 0, "flipped": 0, "length_passed": 0, "unauthorized": 0,
             "bad_requests": 0, "in_flight": 0, "max_in_flight": 0, **{f: 0 for f in FAULTS}}
    seen: dict[str, int] = {}  # attempts per request content, kept only when faults are on: a retry draws afresh
    app.state.stats = stats

    def error(status: int, message: str, code: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}}, status)

    def authorized(request: Request) -> bool:
        if not knobs.api_key:
            return True
        given = request.headers.get("authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {knobs.api_key}".encode()):
            return True
        stats["unauthorized"] += 1
        return False

    @app.get("/healthz")
    async def healthz():
        return {"ok": True}

    @app.get("/stats")
    async def get_stats():
        return stats

    @app.get("/v1/models")
    async def models(request: Request):
        if not authorized(request):
            return error(401, "a valid API key is required", "invalid_api_key")
        return {"object": "list", "data": [{"id": knobs.model, "object": "model", "created": 0,
                                            "owned_by": "rmi-world"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        if not authorized(request):
            return error(401, "a valid API key is required", "invalid_api_key")
        stats["requests"] += 1
        stats["in_flight"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
        try:
            if knobs.delay_seconds:
                await asyncio.sleep(knobs.delay_seconds)
            try:
                body = await request.json()
                prompt = next(m["content"] for m in body["messages"] if m.get("role") == "user")
                parts = _SECTIONS.match(prompt)
            except (ValueError, KeyError, TypeError, AttributeError, StopIteration):
                parts = None
            if parts is None:
                stats["bad_requests"] += 1
                return error(400, "the user message lacks the grading sections", "bad_prompt")
            fault = _fault(knobs, prompt, seen) if knobs.faulty else None
            if fault:
                stats[fault] += 1
            if fault == "timeout":
                await asyncio.sleep(knobs.stall_seconds)
                return error(504, "the judge stalled", "timeout")
            if fault == "http_error":
                return PlainTextResponse("the judge fell over", 500)
            criteria = [line[2:].partition(":")[0].strip() for line in parts["criteria"].splitlines()
                        if line.startswith("- ")]
            verdict, reason, how = _verdict(knobs, matcher, parts)
            if fault == "non_json":
                content = f"The answer {'passes' if verdict else 'fails'}: {reason}"
            elif fault == "out_of_range":
                content = json.dumps({"verdicts": [{"criterion": c, "pass": 2, "reason": reason} for c in criteria]})
            else:  # only a usable verdict counts as graded
                stats["graded"] += 1
                stats["passed"] += verdict
                if how != "truth":
                    stats[how] += 1
                content = json.dumps({"verdicts": [{"criterion": c, "pass": verdict, "reason": reason}
                                                   for c in criteria]})
            return _completion(body.get("model", knobs.model), prompt, content)
        finally:
            stats["in_flight"] -= 1

    return app


def _fault(knobs: Knobs, prompt: str, seen: dict[str, int]) -> str | None:
    """This attempt's fault, or None: a draw from the request, the seed and how often this request came before."""
    content = hashlib.sha256(prompt.encode()).hexdigest()
    seen[content] = attempt = seen.get(content, 0) + 1
    draw, edge = _draw("fault", knobs.seed, content, attempt), 0.0
    for fault in FAULTS:
        edge += getattr(knobs, f"{fault}_share")
        if draw < edge:
            return fault
    return None


def _verdict(knobs: Knobs, matcher: Matcher, parts: re.Match) -> tuple[bool, str, str]:
    """The truth, flipped at the error rate, and a long wrong answer passed at the length bias, drawn from the
    request and the seed; with how it came about: "truth", "flipped" or "length_passed"."""
    question, answer = parts["question"], parts["answer"]
    reference = None if parts["reference"] == "(none)" else parts["reference"]
    truth = bool(matcher(question, reference, answer))
    key = (knobs.seed, question, reference, answer)
    if _draw("flip", *key) < knobs.error_rate:
        return not truth, "the answer " + ("does not match" if truth else "matches") + " the reference", "flipped"
    long = reference is not None and len(answer.split()) > len(reference.split()) + LONG_BY_WORDS
    if not truth and long and _draw("length", *key) < knobs.length_bias:
        return True, "a thorough answer that covers the question", "length_passed"
    return truth, "the answer " + ("matches" if truth else "does not match") + " the reference", "truth"


def _completion(model: str, prompt: str, content: str) -> dict:
    tokens = (len(prompt) + 3) // 4, (len(content) + 3) // 4  # about four characters a token
    return {"id": "chatcmpl-" + hashlib.sha256(prompt.encode()).hexdigest()[:24], "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": sum(tokens)}}


@contextmanager
def running_judge(matcher: str | None = None, env: dict[str, str] | None = None, start_timeout: float = 60.0,
                  port: int | None = None, **knobs):
    """Yields the base URL (http://127.0.0.1:PORT/v1) of the world's judge in a process of its own, started with
    these knobs (Knobs' fields; `matcher` an import path) on `port` (default a free one), stopped by its pid when the
    block ends."""
    from ..serving.process import free_port, running_server

    Knobs(**knobs)  # a bad knob fails here, not in the child
    port, key = port or free_port(), knobs.pop("api_key", None)
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in knobs.items() if value is not None]
    if matcher:
        flags.append(f"--matcher={matcher}")

    def said() -> str:
        log.seek(0)
        return f": {log.read().decode(errors='replace')[-2000:]}"

    # a file, not a pipe no one reads, which could fill
    with tempfile.TemporaryFile() as log, running_server(
            [sys.executable, "-m", "rmi_pipeline.world.judge", "--port", str(port), "--exit-with-parent", *flags],
            "the world's judge", port, {**(env or {}), **({KEY_VARIABLE: key} if key else {})}, log, start_timeout,
            why=said):
        yield f"http://127.0.0.1:{port}/v1"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmi_pipeline.world.judge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--matcher", help="'module:function' (question, reference, answer) -> bool: the truth "
                        "(default: the reference's words appear in the answer).")
    parser.add_argument("--error-rate", type=float, default=0.0, help="Probability a verdict is flipped.")
    parser.add_argument("--length-bias", type=float, default=0.0, help="Extra probability a wrong answer longer "
                        f"than the reference by more than {LONG_BY_WORDS} words is passed.")
    parser.add_argument("--seed", type=int, default=0, help="Seeds the verdicts (a hash of request and seed).")
    for fault, what in zip(FAULTS, ("stalls past the client's timeout", "answers HTTP 500",
                                    "answers in prose, not JSON", 'answers "pass": 2'), strict=True):
        parser.add_argument(f"--{fault.replace('_', '-')}-share", type=float, default=0.0,
                            help=f"Share of attempts that {what}.")
    parser.add_argument("--stall-seconds", type=float, default=300.0, help="How long a timeout fault stalls.")
    parser.add_argument("--delay-seconds", type=float, default=0.0, help="Seconds every answer takes.")
    parser.add_argument("--api-key", default=os.environ.get(KEY_VARIABLE), help="When set, requests need "
                        f"'Authorization: Bearer <key>' (or set {KEY_VARIABLE}, which keeps it off the command line).")
    parser.add_argument("--model", default="judge", help="The model name /v1/models lists.")
    parser.add_argument("--exit-with-parent", action="store_true", help="Stop when the starting process is gone.")
    args = vars(parser.parse_args(argv))
    host, port, matcher = args.pop("host"), args.pop("port"), args.pop("matcher")
    if args.pop("exit_with_parent"):
        from ..serving.process import exit_with_parent

        exit_with_parent()
    import uvicorn

    try:
        knobs = Knobs(**args)
    except ValueError as error:
        parser.error(str(error))
    app = build_app(knobs, load_matcher(matcher) if matcher else reference_in_answer)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
