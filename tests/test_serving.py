"""`rmi serve` over real HTTP on 127.0.0.1: answers from the champion, feedback that lands in the warehouse exactly
once (through kills), refusals that record nothing, an alias move under load, and a standard MLflow client."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from gateway import gateway_in_thread, warehouse_events

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.serving.process import free_port, running_gateway, wait_ready

R = ArithmeticRecipe()


def own_answers(registry, version: str, prompts: list[str]) -> list[str]:
    return R.answer(registry.load(version, R), prompts)


def gateway_settings(settings, root, **serving):
    """`settings` with these RMI_SERVE_* values, and a log and an object store of its own under `root`."""
    return settings.model_copy(update={
        "serving": settings.serving.model_copy(update={"log_path": root / "log.sqlite3", **serving}),
        "storage": settings.storage.model_copy(update={"url": f"file://{root / 'store'}"})})


def written_rows(root) -> int:
    """Events in the batch files a gateway wrote into `root`/store."""
    import polars as pl

    return sum(pl.read_parquet(f).height for f in (root / "store" / "feedback" / "incoming").glob("*.parquet"))


PROMPTS = [f"{a}+{b}=" for a, b in zip(range(100, 160), range(900, 960), strict=True)] + ["70-7=", "5-9="]


def test_a_standard_mlflow_client_loads_the_champion_and_mlflow_serves_it(served):
    """In a fresh process, with only the package installed: `models:/NAME@champion` answers like the pipeline's
    own load of that version, without importing the training framework (Lightning: seconds of start-up), and
    `mlflow models serve` answers /invocations."""
    settings, registry = served["settings"], served["registry"]
    uri = settings.resolved_tracking_uri
    script = ("import json, sys, mlflow, pandas as pd; mlflow.set_tracking_uri(sys.argv[1]); "
              "m = mlflow.pyfunc.load_model(sys.argv[2]); "
              "a = list(m.predict(pd.DataFrame({'prompt': json.loads(sys.argv[3])}))['completion']); "
              "print(json.dumps({'answers': a, 'lightning': 'lightning' in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", script, uri, f"models:/{settings.model_name}@champion",
                          json.dumps(PROMPTS)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    assert out.returncode == 0, out.stderr[-2000:]
    client = json.loads(out.stdout.strip().splitlines()[-1])
    assert client == {"answers": own_answers(registry, "1", PROMPTS), "lightning": False}

    port = free_port()
    mlflow_cli = shutil.which("mlflow", path=os.path.dirname(sys.executable))
    server = subprocess.Popen([mlflow_cli, "models", "serve", "-m", f"models:/{settings.model_name}@champion",
                               "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
                              # as in an activated venv: mlflow starts `uvicorn` from PATH
                              env={**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_DISABLE_TELEMETRY": "true",
                                   "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                reply = httpx.post(f"http://127.0.0.1:{port}/invocations",
                                   json={"dataframe_split": {"columns": ["prompt"], "data": [[p] for p in PROMPTS]}},
                                   timeout=30)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, "mlflow models serve did not start"
                time.sleep(0.5)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
    assert reply.status_code == 200, reply.text
    assert [row["completion"] for row in reply.json()["predictions"]] == own_answers(registry, "1", PROMPTS)


def test_answers_and_feedback_reach_the_warehouse_joined_by_response_id(served):
    """Concurrent askers share forward passes; each answer records its version; a thumbs-down with a correction
    becomes one event that carries the answer's prompt, completion and version; /metrics counts all of it."""
    settings, registry = served["settings"], served["registry"]
    with running_gateway(served["env"]) as (url, _):
        wait_ready(url, "1")

        def ask(prompt):
            return httpx.post(f"{url}/v1/answers", json={"prompts": [prompt], "user_id": "alice"}, timeout=30)

        with ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(ask, PROMPTS))
        answers = [r.json()["answers"][0] for r in replies]
        assert [a["completion"] for a in answers] == own_answers(registry, "1", PROMPTS)
        assert {a["model_version"] for a in answers} == {"1"}
        openai = httpx.post(f"{url}/v1/completions", json={"model": settings.model_name, "prompt": PROMPTS[0],
                                                           "max_tokens": 8})
        assert openai.json()["choices"][0]["text"] == answers[0]["completion"]

        wrong = answers[1]
        sent = httpx.post(f"{url}/v1/feedback", json={"response_id": wrong["response_id"], "rating": "down",
                                                      "correction": "1036", "comment": "check the carry"})
        assert sent.status_code == 202
        retried = {"response_id": answers[2]["response_id"], "rating": "up", "event_id": "app-7f3a"}
        up = [httpx.post(f"{url}/v1/feedback", json=retried) for _ in range(2)][-1]  # a client retrying
        metrics = httpx.get(f"{url}/metrics").text
        assert httpx.post(f"{url}/v1/flush").json()["batches"]
    batches = [line for line in metrics.splitlines() if line.startswith("rmi_batch_prompts_count")]
    assert float(batches[0].split()[-1]) < len(PROMPTS)  # some forward passes answered several askers
    assert 'rmi_model_version{alias="champion",model="rmi-arithmetic"} 1.0' in metrics
    assert 'rmi_feedback_total{rating="down"} 1.0' in metrics

    rows = warehouse_events(settings)
    events = {e["event_id"]: e for e in rows}
    down = events[sent.json()["event_id"]]
    assert (down["prompt"], down["completion"], down["model_version"], down["rating"], down["correction"],
            down["user_id"], down["response_id"]) == (PROMPTS[1], wrong["completion"], "1", "down", "1036", "alice",
                                                      wrong["response_id"])
    assert up.json()["event_id"] == "app-7f3a" and events["app-7f3a"]["rating"] == "up"
    assert sum(e["event_id"] == "app-7f3a" for e in rows) == 1
    unrated = [e for e in events.values() if e["rating"] is None]
    assert len(unrated) >= len(PROMPTS) + 1  # every answer is an event too (traffic per version and slice)


def test_bad_requests_are_refused_with_their_reason_and_record_nothing(served, tmp_path):
    keyed = gateway_settings(served["settings"], tmp_path, api_keys=("k-right",), rate_limit=5.0,
                             feedback_window_hours=1 / 3600, max_prompts=4, max_body_bytes=20_000)
    key = {"Authorization": "Bearer k-right"}
    with gateway_in_thread(keyed) as url:
        wait_ready(url, "1")
        assert httpx.post(f"{url}/v1/answers", json={"prompts": ["1+1="], "user_id": "u"}).status_code == 401
        assert httpx.post(f"{url}/v1/answers", json={"prompts": ["1+1="], "user_id": "u"},
                          headers={"Authorization": "Bearer k-wrong"}).status_code == 401
        answer = httpx.post(f"{url}/v1/answers", json={"prompts": ["1+1="], "user_id": "u"}, headers=key)
        rid = answer.json()["answers"][0]["response_id"]

        def status(path, body=None, content=None):
            reply = httpx.post(f"{url}{path}", json=body, content=content, headers={**key,
                               "Content-Type": "application/json"})
            return reply.status_code, reply.json().get("error", "")

        assert status("/v1/feedback", {"response_id": "r00000001nope", "rating": "up"})[0] == 404
        code, error = status("/v1/feedback", {"response_id": rid, "rating": "sideways"})
        assert code == 422 and "rating" in error
        assert status("/v1/feedback", content=b'{"response_id": "x", "rat')[0] == 422
        code, error = status("/v1/feedback", {"response_id": rid, "rating": "down", "correction": "9" * 5000})
        assert code == 413 and "correction" in error
        assert status("/v1/answers", {"prompts": ["1+1="] * 5, "user_id": "u"})[0] == 413
        assert status("/v1/answers", content=json.dumps({"prompts": ["x" * 30_000], "user_id": "u"}))[0] == 413
        time.sleep(1.2)  # past the one-second feedback window
        code, error = status("/v1/feedback", {"response_id": rid, "rating": "up"})
        assert code == 404 and "expired" in error
        burst = [httpx.get(f"{url}/healthz").status_code for _ in range(3)]  # open: no key, no limit
        # 40 cheap refusals (404) well within the 8 s that 5 requests a second and a burst of 10 would allow
        limited = [status("/v1/feedback", {"response_id": "r00000001nope", "rating": "up"})[0] for _ in range(40)]
        assert burst == [200, 200, 200] and 429 in limited
        time.sleep(1)
        assert httpx.post(f"{url}/v1/flush", headers=key).status_code == 200
    assert written_rows(tmp_path) == 1  # the one answer given; not one refused request left an event


def test_a_full_log_refuses_feedback_with_503_and_acknowledges_nothing(served, tmp_path):
    tiny = gateway_settings(served["settings"], tmp_path, log_max_mb=0.3)
    with gateway_in_thread(tiny) as url:
        wait_ready(url, "1")
        rid = httpx.post(f"{url}/v1/answers", json={"prompts": ["1+1="], "user_id": "u"}).json()["answers"][0][
            "response_id"]
        codes = [httpx.post(f"{url}/v1/feedback", json={"response_id": rid, "rating": "down",
                                                        "comment": "c" * 4000}).status_code for _ in range(120)]
        assert 503 in codes
        accepted = codes.count(202)
        httpx.post(f"{url}/v1/flush")
        assert written_rows(tmp_path) == accepted + 1  # every 202, and the answer; none of the 503s
        assert httpx.post(f"{url}/v1/feedback", json={"response_id": rid, "rating": "up"}).status_code == 202


def test_the_alias_moves_under_load_with_no_failed_request(served):
    """While 8 clients keep asking, `champion` moves to version 2: no request fails, the gateway swaps without a
    restart, and every answer equals what the version it names would answer."""
    registry = served["registry"]
    with running_gateway(served["env"]) as (url, _):
        wait_ready(url, "1")
        results, stop_at = [], time.monotonic() + 60

        def client(i):
            rng = random.Random(i)
            with httpx.Client(base_url=url, timeout=30) as http:
                while time.monotonic() < stop_at:
                    prompt = rng.choice(PROMPTS)
                    reply = http.post("/v1/answers", json={"prompts": [prompt], "user_id": f"u{i}"})
                    results.append((reply.status_code, prompt, reply.json()["answers"][0] if reply.is_success
                                    else None))
                    if any(r[2] and r[2]["model_version"] == "2" for r in results[-20:]) and len(results) > 400:
                        return

        with ThreadPoolExecutor(8) as pool:
            running = [pool.submit(client, i) for i in range(8)]
            time.sleep(1.0)
            registry.promote("2", {"promoted_by": "test"})
            for job in running:
                job.result()
    registry.promote("1", {"promoted_by": "test"})
    assert {code for code, _, _ in results} == {200}
    versions = [a["model_version"] for _, _, a in results]
    assert "1" in versions and "2" in versions
    for version in ("1", "2"):
        asked = [(p, a["completion"]) for _, p, a in results if a["model_version"] == version]
        assert [c for _, c in asked] == own_answers(registry, version, [p for p, _ in asked])


def test_a_killed_gateway_loses_no_acknowledged_feedback(served):
    """kill -9 at random moments while feedback streams in; after each, a new gateway on the same log. Every
    acknowledged (202) event is in the warehouse exactly once, and nothing else is doubled."""
    from rmi_pipeline.serving.log import FeedbackLog

    settings = served["settings"]
    env = {**served["env"], "RMI_SERVE_FLUSH_EVENTS": "150", "RMI_SERVE_FLUSH_SECONDS": "0.5"}
    acknowledged, sent, answers = [], 0, []
    rng = random.Random(7)
    for _ in range(3):
        with running_gateway(env) as (url, process):
            wait_ready(url, "1")
            if not answers:  # asked of the first gateway, rated through all of them
                answers = httpx.post(f"{url}/v1/answers", json={"prompts": PROMPTS[:40], "user_id": "u"}).json()[
                    "answers"]
            stopping = threading.Event()

            def stream(stopping=stopping, url=url, answers=answers):
                nonlocal sent
                with httpx.Client(base_url=url, timeout=10) as http:
                    while not stopping.is_set():
                        sent += 1
                        try:
                            reply = http.post("/v1/feedback", json={"response_id": rng.choice(answers)[
                                "response_id"], "rating": rng.choice(["up", "down"])})
                        except httpx.TransportError:
                            return
                        if reply.status_code == 202:
                            acknowledged.append(reply.json()["event_id"])

            senders = [threading.Thread(target=stream) for _ in range(4)]
            for s in senders:
                s.start()
            time.sleep(rng.uniform(0.5, 2.0))
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            stopping.set()
            for s in senders:
                s.join()
    store = build_resources(settings)["storage"]  # what a fourth gateway would write first: the log's last events
    log = FeedbackLog(settings.resolved_serve_log_path, max_bytes=settings.serving.log_max_bytes, window_seconds=3600)
    log.flush(lambda name, data: store.write_bytes(layout.incoming(name), data))
    log.close()
    ours = {a["response_id"] for a in answers}
    rated = [e["event_id"] for e in warehouse_events(settings) if e["rating"] and e["response_id"] in ours]
    assert len(acknowledged) > 300
    assert set(acknowledged) <= set(rated)
    assert len(rated) == len(set(rated)) and len(rated) <= sent
