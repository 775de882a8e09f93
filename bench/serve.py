"""The gateway against the same model answering the same prompts in process, in one run (the ratios are the figures).

    python bench/serve.py [--requests 2000] [--kills 20] [--feedback 10000]

1. in process: `recipe.answer` on batches of RMI_SERVE_MAX_BATCH prompts (the ceiling), and on one prompt at a time;
2. `rmi serve` on 127.0.0.1 with 1, 8 and 64 concurrent clients (asyncio aiohttp, one prompt a request, a fixed
   number of requests), and 8 clients asking 8 prompts a request: answers per second, p50 and p99 latency;
   feedback acknowledged per second at 64 clients;
3. the alias moved during load: failed requests, and seconds until the new version answers;
4. kill -9 of the gateway at random moments while 64 clients send feedback, until `--feedback` events are
   acknowledged; then ingest every batch file: acknowledged events lost, and events doubled in the warehouse.

The model is the default recipe's, untrained: decoding costs the same whatever its weights.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000, help="answer requests per concurrency level")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--feedback", type=int, default=10000, help="acknowledged feedback events in the kill run")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    os.environ.update(RMI_HOME=str(root / "home"), MLFLOW_DISABLE_TELEMETRY="true", RMI_SERVE_RELOAD_SECONDS="1",
                      DAGSTER_HOME=str(root / "home" / "dagster"))
    import httpx
    import torch

    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.recipes.base import load_recipe
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.serving.process import running_gateway, wait_ready
    from rmi_pipeline.settings import Settings

    settings = Settings()
    prepare_home(settings)
    recipe, registry = load_recipe(settings.recipe), build_resources(settings)["registry"]
    for seed in (1, 2):
        torch.manual_seed(seed)
        with registry.run("bench", tags={}) as run_id:
            registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)), settings.recipe, {})
    registry.promote("1", {"promoted_by": "bench"})
    rng = random.Random(0)
    prompts = [t.prompt for t in recipe.sample_tasks(rng, args.requests, list(recipe.skills), list(recipe.tiers))]

    torch.set_num_threads(settings.serving.threads)  # as many as the gateway's forward pass gets
    model, batch = registry.load("1", recipe), settings.serving.max_batch
    recipe.answer(model, prompts[:batch])  # warm
    t = time.perf_counter()
    for start in range(0, len(prompts), batch):
        recipe.answer(model, prompts[start:start + batch])
    in_process = len(prompts) / (time.perf_counter() - t)
    singles = []
    for p in prompts[:200]:
        t = time.perf_counter()
        recipe.answer(model, [p])
        singles.append(time.perf_counter() - t)
    print(f"in process: {in_process:,.0f} answers/s in batches of {batch}; one prompt at a time "
          f"{1 / statistics.mean(singles):,.0f}/s, p50 {_ms(singles, 50)} ms")

    with running_gateway(log_file=root / "serve.log") as (url, _):
        wait_ready(url, "1")
        rows = {}
        for clients in (1, 8, 64):
            n = min(args.requests, 300) if clients == 1 else args.requests
            rate, latencies, failed, rids = asyncio.run(_answers(url, prompts[:n], clients))
            rows[clients] = rate
            print(f"gateway, {clients:2d} clients: {rate:,.0f} answers/s ({rate / in_process:.2f}x in process "
                  f"batched), p50 {_ms(latencies, 50)} ms, p99 {_ms(latencies, 99)} ms, {failed} failed")
        rate, latencies, failed, _ = asyncio.run(_answers(url, prompts, 8, per_request=8))
        print(f"gateway,  8 clients asking 8 prompts a request: {rate:,.0f} answers/s ({rate / in_process:.2f}x), "
              f"p50 {_ms(latencies, 50)} ms, p99 {_ms(latencies, 99)} ms, {failed} failed")
        acks, seconds, failed = asyncio.run(_feedback(url, rids, 3000, 64))
        print(f"gateway, 64 clients: {len(acks) / seconds:,.0f} feedback events acknowledged/s, {failed} failed")

        moved = {}

        def promote_soon():
            time.sleep(2)
            moved["at"] = time.monotonic()
            registry.promote("2", {"promoted_by": "bench"})

        threading.Thread(target=promote_soon).start()
        rate, latencies, failed, _, first_new = asyncio.run(_answers(url, prompts, 8, watch="2"))
        serving = httpx.get(f"{url}/readyz").json()["model_version"]
        print(f"alias moved during load (8 clients, {len(prompts)} requests): {failed} failed; version 2 answered "
              f"{first_new - moved['at']:.2f} s after the move (RMI_SERVE_RELOAD_SECONDS=1 plus its load); "
              f"serving v{serving} after")

    _kills(root, recipe, settings, args.kills, args.feedback)


def _ms(values: list[float], q: int) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))] * 1000:.1f}"


def _session(url: str, clients: int):
    import aiohttp  # the world's client too: httpx's async client costs more than the gateway at 64 connections

    return aiohttp.ClientSession(base_url=url, connector=aiohttp.TCPConnector(limit=clients),
                                 timeout=aiohttp.ClientTimeout(total=60))


async def _answers(url, prompts, clients, watch: str | None = None, per_request: int = 1):
    import aiohttp

    queue = [prompts[i:i + per_request] for i in range(0, len(prompts), per_request)][::-1]
    latencies, rids, failed, first = [], [], 0, {}
    async with _session(url, clients) as http:
        async def ping():
            async with http.get("/healthz") as reply:
                await reply.read()

        for _ in range(2):  # open every connection before the clock starts
            await asyncio.gather(*(ping() for _ in range(clients)))

        async def client(i):
            nonlocal failed
            while queue:
                asked = queue.pop()
                t = time.perf_counter()
                try:
                    async with http.post("/v1/answers", json={"prompts": asked, "user_id": f"u{i}"}) as reply:
                        reply.raise_for_status()
                        answer = (await reply.json())["answers"][0]
                except aiohttp.ClientError:
                    failed += 1
                    continue
                latencies.append(time.perf_counter() - t)
                rids.append(answer["response_id"])
                if watch and answer["model_version"] == watch:
                    first.setdefault("at", time.monotonic())
        t = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        rate = len(latencies) * per_request / (time.perf_counter() - t)
    return (rate, latencies, failed, rids, first.get("at", float("nan"))) if watch else \
        (rate, latencies, failed, rids)


async def _feedback(url, rids, n, clients, acked=None, stop_on_error=False):
    import aiohttp

    acks = [] if acked is None else acked
    rng, failed, todo = random.Random(1), 0, [n]
    async with _session(url, clients) as http:
        async def client():
            nonlocal failed
            while todo[0] > 0:
                todo[0] -= 1
                try:
                    async with http.post("/v1/feedback", json={"response_id": rng.choice(rids),
                                                               "rating": rng.choice(["up", "down"])}) as reply:
                        if reply.status == 202:
                            acks.append((await reply.json())["event_id"])
                        else:
                            failed += 1
                except (TimeoutError, aiohttp.ClientError):
                    if stop_on_error:
                        return
                    failed += 1
        t = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
    return acks, time.perf_counter() - t, failed


def _kills(root, recipe, settings, kills: int, target: int) -> None:
    """Feedback streams in; the gateway is killed (SIGKILL) at random moments and started again on its log."""
    import httpx
    from dagster import DagsterInstance

    from rmi_pipeline.automation.in_process import ingest_new_batches
    from rmi_pipeline.definitions import build_definitions
    from rmi_pipeline.serving.process import running_gateway, stop, wait_ready

    env = {"RMI_SERVE_FLUSH_EVENTS": "500", "RMI_SERVE_FLUSH_SECONDS": "1"}
    rng = random.Random(2)
    with running_gateway(env) as (url, _):
        wait_ready(url, None)
        rids = [a["response_id"] for a in httpx.post(f"{url}/v1/answers", json={
            "prompts": [t.prompt for t in recipe.sample_tasks(rng, 64, list(recipe.skills), [3])],
            "user_id": "bench"}).json()["answers"]]
    acked: list[str] = []
    per_round = target // (kills + 1)
    for k in range(kills + 1):
        with running_gateway(env) as (url, process):
            if k < kills:
                killer = threading.Timer(rng.uniform(0.3, 3.0), os.kill, (process.pid, signal.SIGKILL))
                killer.start()
            last = max(per_round, target - len(acked))
            asyncio.run(_feedback(url, rids, last if k == kills else 100 * per_round, 64, acked,
                                  stop_on_error=True))
            if k == kills:
                httpx.post(f"{url}/v1/flush", timeout=60)
                stop(process)
    defs = build_definitions(settings)
    counts = ingest_new_batches(defs, DagsterInstance.get())
    with defs.resources["warehouse"].connect(read_only=True) as conn:  # this run's feedback, on its own answers
        rated = [r[0] for r in conn.execute("SELECT event_id FROM feedback_events WHERE rating IS NOT NULL AND "
                                            "meta->>'response_id' IN (SELECT unnest(?))", [rids]).fetchall()]
    lost = len(set(acked) - set(rated))
    print(f"kills: {kills} kill -9s while 64 clients sent feedback; {len(acked):,} acknowledged, {lost} lost, "
          f"{len(rated) - len(set(rated))} doubled in the warehouse ({counts['duplicates']} repeats the warehouse "
          f"set aside as duplicates; {len(rated) - len(set(acked)):+d} rated events beyond the acknowledged: "
          "sent but killed before the 202)")


if __name__ == "__main__":
    main()
