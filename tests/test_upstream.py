"""`rmi serve --upstream URL`: the gateway in front of an OpenAI-compatible engine, over real HTTP on 127.0.0.1.

The engine is a second `rmi serve` (it speaks OpenAI's API, and answers NAME@champion and NAME@canary with different
versions), or, for what only vLLM does (its runtime LoRA API) and for engines that fail, a stand-in FastAPI app that
speaks the protocol and records every call. The proxy shares the engine's registry, as a real deployment does: the
version it records with an answer is the one behind its arm's alias. The engine, being a gateway too, keeps its own
log in its own home; a real engine keeps none: the assertions are about the proxy's events, which land in the proxy's
home. Untrained models: the plumbing, not the answers' quality, is under test."""

import asyncio
import io
import json
import os
import random
import signal
import sqlite3
import tarfile
import threading
import time

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from gateway import app_in_thread, forked_gateway, gateway_in_thread, untrained_home, warehouse_events
from openai import OpenAI

from rmi_pipeline.cli.home import prepare_home
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.serving.app import build_app
from rmi_pipeline.serving.log import FeedbackLog
from rmi_pipeline.serving.process import wait_ready
from rmi_pipeline.serving.routing import in_canary
from rmi_pipeline.settings import DEFAULT_RECIPE, Settings

NAME = "rmi-arithmetic"
ASKED = "5+123="


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The engine: a gateway over three untrained versions, v1 champion, v2 the canary, v3 the challenger."""
    root = tmp_path_factory.mktemp("upstream")
    settings, registry = untrained_home(root / "engine", 3, RMI_CANARY_SHARE="0.5")
    registry.start_canary("2", {})
    registry.point("challenger", "3", {})
    with gateway_in_thread(settings) as url:
        wait_ready(url, "1", canary="2")
        yield {"root": root, "url": url, "settings": settings}


def beside(engine, name: str, **env: str) -> tuple[Settings, dict[str, str]]:
    """A home of its own (log, store, warehouse) on the engine's registry: (settings, its environment)."""
    home = engine["root"] / name
    env = {"RMI_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "MLFLOW_DISABLE_TELEMETRY": "true",
           "RMI_MLFLOW_TRACKING_URI": engine["settings"].resolved_tracking_uri, **env}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        settings = Settings()
    prepare_home(settings)
    return settings, env


def routed(engine, **more: str) -> dict[str, str]:
    """Each arm to the engine's name for it (here the engine's own NAME@alias); and `more` settings."""
    return {"RMI_SERVE_UPSTREAM_URL": f"{engine['url']}/v1", "RMI_SERVE_UPSTREAM_CHAMPION_MODEL": f"{NAME}@champion",
            "RMI_SERVE_UPSTREAM_CANARY_MODEL": f"{NAME}@canary",
            "RMI_SERVE_UPSTREAM_CHALLENGER_MODEL": f"{NAME}@canary", "RMI_CANARY_SHARE": "0.5", **more}


@pytest.fixture(scope="module")
def proxy(engine):
    settings, _ = beside(engine, "proxy", **routed(engine, RMI_SERVE_SHADOW="true"))
    with app_in_thread(build_app(settings)) as url:
        wait_ready(url, "1", canary="2")
        yield {"url": url, "settings": settings}


def sdk(url: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def logged(settings) -> list[dict]:
    """The answers in a gateway's feedback log (read-only)."""
    with sqlite3.connect(f"file:{settings.resolved_serve_log_path}?mode=ro", uri=True) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT response_id, user_id, model_version, prompt, completion, "
                                              "arm FROM answers")]


def test_the_openai_sdk_through_the_proxy_gets_the_engine_s_answers_plain_and_streamed(engine, proxy):
    """Completions and chats, plain and streamed, answer what the engine answers for the champion; a streamed answer
    joins to the plain one's text; each reply's id is the proxy's response id (not the engine's), on every chunk and
    choice with the version behind the alias, and /v1/feedback takes it."""
    direct, through = sdk(engine["url"]), sdk(proxy["url"])
    want = direct.completions.create(model=f"{NAME}@champion", prompt=ASKED).choices[0].text
    plain = through.completions.create(model=NAME, prompt=ASKED, user="ann")
    assert plain.choices[0].text == want and plain.model == f"{NAME}/1"  # `model`: as the engine names it
    assert plain.id.startswith("r") and plain.id == plain.choices[0].model_extra["response_id"]
    assert plain.choices[0].model_extra["model_version"] == "1"
    chunks = list(through.completions.create(model=f"{NAME}@champion", prompt=ASKED, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want
    assert len({c.id for c in chunks}) == 1 and chunks[0].id not in (plain.id, None)

    chat = [{"role": "system", "content": "You add."}, {"role": "user", "content": ASKED}]
    reply = through.chat.completions.create(model=NAME, messages=chat, user="ann")
    assert reply.choices[0].message.content == want
    streamed = list(through.chat.completions.create(model=NAME, messages=chat, user="ann", stream=True,
                                                    stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == want
    assert streamed[-1].usage == reply.usage  # the engine's usage, passed on

    ids = {plain.id, chunks[0].id, reply.id, streamed[0].id}
    for response_id in ids:
        assert httpx.post(f"{proxy['url']}/v1/feedback", json={"response_id": response_id, "rating": "up"}
                          ).status_code == 202
    recorded = {a["response_id"]: a for a in logged(proxy["settings"])}
    assert ids <= set(recorded) and {recorded[i]["completion"] for i in ids} == {want}
    assert recorded[reply.id]["prompt"] == ASKED  # a chat is recorded as its last (user's) message
    models = httpx.get(f"{proxy['url']}/v1/models").json()["data"]
    assert {m["id"]: m["upstream_model"] for m in models}[f"{NAME}@canary"] == f"{NAME}@canary"
    refused = httpx.post(f"{proxy['url']}/v1/completions", json={"prompt": ASKED, "tools": [{"type": "function"}]})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "tools"


def test_the_canary_s_share_of_users_is_sent_to_the_canary_s_engine_model(proxy):
    """With a canary on trial, the users routing.in_canary picks are answered by the engine's canary model and
    recorded with arm canary and its version; the others by the champion's; NAME@canary pins the canary."""
    client, users = sdk(proxy["url"]), [f"user-{i}" for i in range(40)]
    replies = {u: client.completions.create(model=NAME, prompt=ASKED, user=u) for u in users}
    canary = {u for u in users if in_canary(u, "2", 0.5)}
    assert 5 < len(canary) < 35
    assert {u for u, r in replies.items() if r.model == f"{NAME}/2"} == canary  # the engine's canary answered
    recorded = {a["response_id"]: a for a in logged(proxy["settings"])}
    for user, reply in replies.items():
        answer = recorded[reply.id]
        arm, version = ("canary", "2") if user in canary else ("champion", "1")
        assert (answer["arm"], answer["model_version"], answer["user_id"]) == (arm, version, user)
        assert reply.choices[0].model_extra["model_version"] == version
    pinned = client.completions.create(model=f"{NAME}@canary", prompt=ASKED, user=sorted(set(users) - canary)[0])
    assert pinned.model == f"{NAME}/2" and recorded.get(pinned.id) is None
    assert {a["response_id"]: a for a in logged(proxy["settings"])}[pinned.id]["arm"] == "canary"
    shadow = httpx.get(f"{proxy['url']}/v1/shadow").json()  # the challenger (v3) asked in the background
    deadline = time.monotonic() + 20
    while not shadow["slices"] and time.monotonic() < deadline:
        time.sleep(0.2)
        shadow = httpx.get(f"{proxy['url']}/v1/shadow").json()
    assert shadow["challenger_version"] == "3" and sum(s["answers"] for s in shadow["slices"].values()) > 0


def test_answers_and_feedback_through_the_proxy_land_in_the_warehouse_exactly_once(engine):
    """Every answer the proxy gives is one unrated event and every feedback one rated event in the proxy's warehouse,
    with the proxy's response ids and versions; the engine's own records (its log, in its own home) are not in it.
    A choice the client's max_tokens ended, plain or streamed, is recorded as cut, and only such a choice."""
    settings, _ = beside(engine, "exactly-once", **routed(engine, RMI_CANARY_SHARE="0"))
    with app_in_thread(build_app(settings)) as url:
        wait_ready(url, "1")
        client, given = sdk(url), []
        given += [c.model_extra["response_id"] for c in client.completions.create(
            model=NAME, prompt=[ASKED, "12+34="], n=2, user="bo").choices]
        given.append(client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "7+8="}],
                                                   user="bo").id)
        given.append(list(client.completions.create(model=NAME, prompt="1+2=", stream=True, user="bo"))[0].id)
        given += [a["response_id"] for a in httpx.post(f"{url}/v1/answers", json={"prompts": ["3+4=", "5+6="],
                                                                                  "user_id": "bo"}).json()["answers"]]
        cut = [client.completions.create(model=NAME, prompt="12+34=", max_tokens=1, user="bo").id,
               list(client.completions.create(model=NAME, prompt="12+34=", max_tokens=1, stream=True,
                                              user="bo"))[0].id]
        given += cut
        acknowledged = [httpx.post(f"{url}/v1/feedback", json={"response_id": rid, "rating": "down",
                                                               "correction": "9"}).json()["event_id"]
                        for rid in given]
        assert httpx.post(f"{url}/v1/flush").status_code == 200
    assert httpx.post(f"{engine['url']}/v1/flush").status_code == 200  # the engine's own batches: its own home
    events = warehouse_events(settings)
    assert len(given) == len(set(given)) == 10
    assert {e["response_id"] for e in events if e["cut"] == "true"} == set(cut)
    assert sorted(e["response_id"] for e in events if e["rating"] is None) == sorted(given)
    assert sorted(e["event_id"] for e in events if e["rating"] == "down") == sorted(acknowledged)
    assert len(events) == 2 * len(given) and {e["model_version"] for e in events} == {"1"}
    assert {e["user_id"] for e in events} == {"bo"}


def test_a_killed_proxy_loses_no_acknowledged_answer_or_feedback(engine, tmp_path):
    """kill -9 the proxy's process 20 times while feedback and questions stream in, a new one on the same log after
    each (forked from a server that imported the package, so that each is up in about a second). Every
    acknowledged feedback and every answer given is in the warehouse exactly once."""
    settings, env = beside(engine, "killed", **routed(engine, RMI_SERVE_FLUSH_EVENTS="150",
                                                      RMI_SERVE_FLUSH_SECONDS="0.5", RMI_CANARY_SHARE="0"))
    out, rng = str(tmp_path / "proxy.log"), random.Random(11)
    acknowledged, given, sent, rated, per_process = [], [], 0, [], []
    for _ in range(20):
        process, url = forked_gateway(env, ["--upstream", f"{engine['url']}/v1"], out)
        try:
            _wait_alive(url, process)
            if not rated:  # asked of the first proxy, rated through all of them
                wait_ready(url, "1")
                rated = httpx.post(f"{url}/v1/answers", json={"prompts": [f"{i}+1=" for i in range(40)],
                                                             "user_id": "u"}, timeout=30).json()["answers"]
                given.extend(a["response_id"] for a in rated)
            stopping = threading.Event()

            def rate(stopping=stopping, url=url, rated=rated):
                nonlocal sent
                with httpx.Client(base_url=url, timeout=10) as http:
                    while not stopping.is_set():
                        sent += 1
                        try:
                            reply = http.post("/v1/feedback", json={"response_id": rng.choice(rated)["response_id"],
                                                                    "rating": rng.choice(["up", "down"])})
                        except httpx.TransportError:
                            return
                        if reply.status_code == 202:
                            acknowledged.append(reply.json()["event_id"])

            def ask(stopping=stopping, url=url):
                with httpx.Client(base_url=url, timeout=10) as http:
                    while not stopping.is_set():
                        try:
                            reply = http.post("/v1/completions", json={"prompt": "2+2=", "user": "u"})
                        except httpx.TransportError:
                            return
                        if reply.status_code == 200:
                            given.append(reply.json()["id"])
                        else:
                            time.sleep(0.05)  # 503 until this process has read the registry

            senders = [threading.Thread(target=rate) for _ in range(3)] + [threading.Thread(target=ask)]
            for s in senders:
                s.start()
            before = len(acknowledged)
            time.sleep(rng.uniform(0.2, 0.8))
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.join()
        stopping.set()
        for s in senders:
            s.join()
        per_process.append(len(acknowledged) - before)
    store = build_resources(settings)["storage"]  # what a 21st proxy would write first: the log's last events
    log = FeedbackLog(settings.resolved_serve_log_path, max_bytes=settings.serving.log_max_bytes, window_seconds=3600)
    log.flush(lambda name, data: store.write_bytes(layout.incoming(name), data))
    log.close()
    events = warehouse_events(settings)
    answers = [e["response_id"] for e in events if e["rating"] is None]
    feedback = [e["event_id"] for e in events if e["rating"]]
    assert len(acknowledged) > 200 and sum(1 for n in per_process if n) >= 10  # most were killed under load
    assert len(given) >= 40
    assert set(acknowledged) <= set(feedback) and len(feedback) == len(set(feedback)) and len(feedback) <= sent
    assert sorted(answers) == sorted(set(answers)) and set(given) <= set(answers)


def _wait_alive(url: str, process, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert process.is_alive(), "the proxy exited before it answered"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the proxy did not answer on {url}"
        time.sleep(0.05)


# ---- a stand-in for vLLM: its completions and its runtime LoRA API, every call recorded ------------------------

def stand_in() -> FastAPI:
    """A server on 127.0.0.1 that speaks vLLM's protocol: completions (streamed too), load_lora_adapter and
    unload_lora_adapter. `state.mode` makes it fail: fail (500), garbage (not JSON), huge (a reply past the limit),
    refuse (400), slow (past the timeout), broken (an error event mid-stream); `state.pause` holds a stream after
    its first chunk."""
    app = FastAPI()
    app.state.calls, app.state.mode, app.state.pause = [], "ok", 0.0

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        app.state.calls.append(("completions", body))
        mode, text = app.state.mode, f"answer from {body['model']}"
        if mode == "fail":
            return JSONResponse({"error": {"message": "CUDA out of memory"}}, 500)
        if mode == "garbage":
            return PlainTextResponse("<html>bad gateway</html>")
        if mode == "huge":
            return {"choices": [{"index": 0, "text": "x" * 2_000_000, "finish_reason": "length"}]}
        if mode == "refuse":
            return JSONResponse({"error": {"message": "max_tokens is too large", "param": "max_tokens"}}, 400)
        if mode == "slow":
            await asyncio.sleep(5)
        if not body.get("stream"):
            return {"id": "cmpl-engine", "object": "text_completion", "model": body["model"],
                    "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}

        def event(piece: str, finish: str | None = None) -> bytes:
            chunk = {"id": "cmpl-engine", "object": "text_completion", "model": body["model"],
                     "choices": [{"index": 0, "text": piece, "finish_reason": finish}]}
            return b"data: " + json.dumps(chunk).encode() + b"\n\n"

        async def events():
            yield event(text[:6])
            if mode == "broken":
                yield b'data: {"error": {"message": "the engine died", "code": 500}}\n\n'
                return
            await asyncio.sleep(app.state.pause)
            yield event(text[6:])
            yield event("", "stop")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/load_lora_adapter")
    async def load(request: Request):
        app.state.calls.append(("load", await request.json()))
        return PlainTextResponse("Success: LoRA adapter added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload(request: Request):
        app.state.calls.append(("unload", await request.json()))
        return PlainTextResponse("Success: LoRA adapter removed successfully.")

    @app.get("/healthz")
    async def healthz():
        return {"ok": True}

    return app


def adapter_checkpoint(tag: str) -> bytes:
    """A checkpoint as the Hugging Face recipe writes one with LoRA kept apart: a tar whose adapter/ is peft's."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (("adapter/adapter_config.json", json.dumps({"r": 8, "tag": tag}).encode()),
                           ("adapter/adapter_model.safetensors", f"weights {tag}".encode()),
                           ("model/config.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def lora(engine):
    """A proxy with RMI_SERVE_UPSTREAM_LOAD_ADAPTERS in front of the stand-in, over a model of its own in the same
    registry whose v1 holds an adapter."""
    settings, _ = beside(engine, "lora", RMI_MODEL_NAME="rmi-lora", RMI_CANARY_SHARE="0",
                         RMI_SERVE_RELOAD_SECONDS="0.2", RMI_SERVE_UPSTREAM_LOAD_ADAPTERS="true",
                         RMI_SERVE_UPSTREAM_ENGINE_ADAPTER_DIR="/engine/adapters",
                         RMI_SERVE_UPSTREAM_TIMEOUT_SECONDS="2", RMI_SERVE_UPSTREAM_MAX_REPLY_BYTES="1000000")
    registry = build_resources(settings)["registry"]

    def register(checkpoint: bytes) -> str:
        with registry.run("adapters", tags={}) as run_id:
            return str(registry.register_model(run_id, checkpoint, DEFAULT_RECIPE, tags={}, alias=None).version)

    registry.promote(register(adapter_checkpoint("v1")), {})
    app = stand_in()
    with app_in_thread(app) as engine_url:
        settings = settings.model_copy(update={"upstream": settings.upstream.model_copy(
            update={"url": f"{engine_url}/v1"})})
        with app_in_thread(build_app(settings)) as url:
            wait_ready(url, "1")
            yield {"url": url, "settings": settings, "engine": app.state, "registry": registry, "register": register,
                   "arithmetic": build_resources(engine["settings"])["registry"].checkpoint("1")[1]}


def test_an_engine_that_fails_gets_the_client_a_502_and_records_nothing(lora):
    """A 500, a reply that is not JSON, one past RMI_SERVE_UPSTREAM_MAX_REPLY_BYTES, one past the timeout: 502 in
    OpenAI's error shape (the engine's refusal of a malformed request: 400 with its reason); an error event
    mid-stream, or a client that leaves mid-stream: no data: [DONE]; nothing of any of them is recorded."""
    url, state = lora["url"], lora["engine"]
    before = len(logged(lora["settings"]))
    try:
        for mode in ("fail", "garbage", "huge", "slow"):
            state.mode = mode
            reply = httpx.post(f"{url}/v1/completions", json={"prompt": ASKED}, timeout=30)
            assert reply.status_code == 502 and reply.json()["error"]["type"] == "server_error", mode
        state.mode = "refuse"
        reply = httpx.post(f"{url}/v1/completions", json={"prompt": ASKED, "max_tokens": 10**6})
        assert reply.status_code == 400 and "max_tokens is too large" in reply.json()["error"]["message"]
        assert reply.json()["error"]["param"] == "max_tokens"
        state.mode = "broken"
        with httpx.stream("POST", f"{url}/v1/completions", json={"prompt": ASKED, "stream": True}) as stream:
            lines = [line for line in stream.iter_lines() if line]
        assert '"error"' in lines[-1] and "data: [DONE]" not in lines
        state.mode, state.pause = "ok", 1.0
        with httpx.stream("POST", f"{url}/v1/completions", json={"prompt": ASKED, "stream": True}) as stream:
            left = json.loads(next(stream.iter_lines())[6:])["id"]  # the client leaves after the first chunk
        time.sleep(1.5)
        assert httpx.post(f"{url}/v1/feedback", json={"response_id": left, "rating": "up"}).status_code == 404
    finally:
        state.mode, state.pause = "ok", 0.0
    assert len(logged(lora["settings"])) == before
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    assert "502" in paths["/v1/chat/completions"]["post"]["responses"]


def test_feedback_on_an_answer_still_streaming_waits_until_it_is_recorded(lora):
    """The stream is passed on as the engine writes it and recorded before data: [DONE]; feedback sent with the id
    of its first chunk, while the engine still writes, waits for the answer, then lands (202, not 404)."""
    url, state = lora["url"], lora["engine"]
    state.pause = 1.0
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json={"prompt": ASKED, "stream": True}) as stream:
            lines = stream.iter_lines()
            first = json.loads(next(lines)[6:])
            started = time.monotonic()
            reply = httpx.post(f"{url}/v1/feedback", json={"response_id": first["id"], "rating": "up"}, timeout=30)
            waited = time.monotonic() - started
            rest = [line for line in lines if line]
    finally:
        state.pause = 0.0
    assert first["choices"][0]["response_id"] == first["id"] and first["choices"][0]["model_version"] == "1"
    assert reply.status_code == 202 and waited > 0.5
    assert rest[-1] == "data: [DONE]"
    recorded = {a["response_id"]: a for a in logged(lora["settings"])}[first["id"]]
    assert recorded["completion"] == "answer from rmi-lora-v1"


def test_a_promotion_loads_the_new_version_s_adapter_into_the_engine(lora, caplog):
    """With RMI_SERVE_UPSTREAM_LOAD_ADAPTERS, the champion's adapter is exported (the checkpoint's adapter/ folder) and
    loaded with vLLM's POST /v1/load_lora_adapter as NAME-vVERSION, at the path the engine sees; a promotion loads
    the new version's, the proxy then asks the engine for it and records its version, and the old adapter is
    unloaded once no arm uses it. A version whose checkpoint holds no adapter (the arithmetic GPT) is not followed:
    the arm keeps its adapter, and the log says why."""
    url, state, registry = lora["url"], lora["engine"], lora["registry"]
    folder = lora["settings"].resolved_home / "serve" / "adapters"
    loads = lambda: [body for kind, body in state.calls if kind == "load"]  # noqa: E731
    assert loads()[0] == {"lora_name": "rmi-lora-v1", "lora_path": "/engine/adapters/rmi-lora-v1"}
    assert json.loads((folder / "rmi-lora-v1" / "adapter_config.json").read_text())["tag"] == "v1"

    registry.promote(lora["register"](adapter_checkpoint("v2")), {})
    wait_ready(url, "2", timeout=30)
    assert loads()[-1] == {"lora_name": "rmi-lora-v2", "lora_path": "/engine/adapters/rmi-lora-v2"}
    assert (folder / "rmi-lora-v2" / "adapter_model.safetensors").read_bytes() == b"weights v2"
    reply = httpx.post(f"{url}/v1/completions", json={"prompt": ASKED}).json()
    assert [body["model"] for kind, body in state.calls if kind == "completions"][-1] == "rmi-lora-v2"
    assert reply["choices"][0]["model_version"] == "2" and reply["model"] == "rmi-lora-v2"
    deadline = time.monotonic() + 20
    while ("unload", {"lora_name": "rmi-lora-v1"}) not in state.calls:
        assert time.monotonic() < deadline, "the replaced adapter was never unloaded"
        time.sleep(0.2)

    caplog.set_level("WARNING")
    registry.promote(lora["register"](lora["arithmetic"]), {})  # v3: the arithmetic GPT, trained whole
    time.sleep(2)  # ten looks at the alias
    assert httpx.get(f"{url}/readyz").json()["model_version"] == "2"
    assert [body["lora_name"] for body in loads()] == ["rmi-lora-v1", "rmi-lora-v2"]
    assert "model version 3 holds no LoRA adapter" in caplog.text


def test_every_reply_of_the_proxy_is_one_its_openapi_document_describes(proxy):
    """schemathesis against the proxy (in front of a gateway that refuses what it cannot honour, which the proxy
    passes on as a 400): every reply is one the document describes, and none fails the server."""
    import schemathesis
    from schemathesis.engine import Status, events
    from test_openapi_contract import CONFIG, failure

    schema = schemathesis.openapi.from_url(f"{proxy['url']}/openapi.json",
                                           config=schemathesis.config.SchemathesisConfig.from_dict(CONFIG))
    found, cases = [], 0
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            cases += len(event.recorder.cases)
            found += [failure(event.recorder, case_id, check.failure_info)
                      for case_id, checks in event.recorder.checks.items() for check in checks
                      if check.status == Status.FAILURE and check.failure_info]
        elif isinstance(event, events.NonFatalError | events.FatalError):
            found.append(repr(event))
    assert cases > 100
    assert not found, "\n".join(dict.fromkeys(found))
