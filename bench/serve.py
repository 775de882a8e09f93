"""The gateway against the same model answering the same prompts in process, in one run (the ratios are the figures).

    python bench/serve.py [--requests 2000] [--kills 20] [--feedback 10000] [--tiers 1-8] [--out bench-serve.jsonl]

The workload is fixed, so that runs compare whatever the recipe's tiers or the serving defaults become; it is printed
first, and written with the figures:
- prompts: the arithmetic recipe's sums and differences (`a+b=`, `a-b=`), evenly over add and sub and over tiers
  1-8 digits (`--tiers`; the recipe's tiers when the 2026-12-01 figures in docs/log.md were measured), seed 0.
  That recipe padded every prompt to 8 digits, so a batch decoded in 9 steps; today's left-pads a batch's prompts
  to its widest and decodes them together (9 steps over tiers 1-8; from 2026-12-01 to 2026-12-07 one group per
  operand width, up to 44 steps), so its figures compare with those by their ratios only;
- the model: the arithmetic recipe's "tiny" size (`--size`), untrained: decoding costs the same whatever its weights;
- the gateway: batches of up to 64 prompts gathered for up to 5 ms, one torch thread (RMI_SERVE_MAX_BATCH,
  RMI_SERVE_MAX_WAIT_MS, RMI_SERVE_THREADS as in WORKLOAD, whatever the environment says), every answer greedy, no
  API keys, no shadow; clients 1, 8 and 64.

Stages:
1. in process: `recipe.answer` on batches of 64 prompts, and on one prompt at a time (200);
2. `rmi serve` on 127.0.0.1 with 1, 8 and 64 concurrent clients (asyncio aiohttp, one prompt a request; the
   1-client row asks at most 300), and 8 clients asking 8 prompts a request: answers per second, p50 and p99
   latency, the mean batch the gateway decoded (its /metrics), and the CPU time an answer cost the gateway and the
   clients, with the rate the machine's cores allow at that cost (the clients share them); feedback acknowledged
   per second at 64 clients;
3. the alias moved during load (8 clients, 2 s in, until the new version has answered for a second): failed
   requests, and seconds until the new version answers;
4. kill -9 of the gateway at random moments while 64 clients send feedback, until `--feedback` events are
   acknowledged; then ingest every batch file: acknowledged events lost, and events doubled in the warehouse.

The figures are printed as they come, each stage's with the machine's load average as it ended (on a shared machine
a ratio is only as good as the load was steady), then as one table in the shape of the log's serving entries (a new
measurement is a new dated entry in docs/log.md); `--out` appends them, with the workload, as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

RECIPE = "rmi_pipeline.recipes.arithmetic:ArithmeticRecipe"
# the gateway's settings under test, set in its environment: what a change of the defaults must not move
WORKLOAD = {"RMI_SERVE_MAX_BATCH": "64", "RMI_SERVE_MAX_WAIT_MS": "5", "RMI_SERVE_THREADS": "1",
            "RMI_SERVE_EXPLORE_SHARE": "0", "RMI_SERVE_SHADOW": "false", "RMI_SERVE_API_KEYS": ""}
CLIENTS = (1, 8, 64)
SINGLES = 200  # prompts answered one at a time in process
ONE_CLIENT = 300  # at most this many requests from one client: it is slow, and its figure settles early


def tiers(text: str) -> list[int]:
    """'1-8' or '1,2,5'."""
    if "-" in text:
        first, last = map(int, text.split("-"))
        return list(range(first, last + 1))
    return [int(t) for t in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="answer requests per concurrency level")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--feedback", type=int, default=10000, help="acknowledged feedback events in the kill run")
    parser.add_argument("--tiers", type=tiers, default=tiers("1-8"), help="digits of the prompts' operands")
    parser.add_argument("--size", default="tiny", help="the arithmetic recipe's model size")
    parser.add_argument("--out", type=Path, help="append the workload and figures here as one JSON line")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    os.environ.update(RMI_HOME=str(root / "home"), MLFLOW_DISABLE_TELEMETRY="true", RMI_SERVE_RELOAD_SECONDS="1",
                      DAGSTER_HOME=str(root / "home" / "dagster"), RMI_RECIPE=RECIPE, **WORKLOAD)
    import torch

    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.recipes.base import load_recipe
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.settings import Settings

    settings = Settings()
    prepare_home(settings)
    recipe, registry = load_recipe(settings.recipe), build_resources(settings)["registry"]
    for seed in (1, 2):
        torch.manual_seed(seed)
        with registry.run("bench", tags={}) as run_id:
            registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1, size=args.size)),
                                    settings.recipe, {})
    registry.promote("1", {"promoted_by": "bench"})
    prompts = [t.prompt for t in recipe.sample_tasks(random.Random(0), args.requests, list(recipe.skills),
                                                     args.tiers)]
    model = registry.load("1", recipe)
    workload = {"recipe": recipe.name, "skills": list(recipe.skills), "tiers": args.tiers, "seed": 0,
                "model_size": args.size, "parameters": sum(p.numel() for p in model.parameters()),
                "trained": False, "max_batch": settings.serving.max_batch, "max_wait_ms": settings.serving.max_wait_ms,
                "threads": settings.serving.threads, "clients": list(CLIENTS), "requests": args.requests,
                "kills": args.kills, "feedback": args.feedback, "cpus": os.cpu_count()}
    print(f"workload: {recipe.name} recipe, {'/'.join(recipe.skills)} evenly over tiers "
          f"{_span(args.tiers)} digits, seed 0; model {args.size!r} untrained, {workload['parameters']:,} parameters; "
          f"gateway batches of up to {workload['max_batch']} gathered for up to {workload['max_wait_ms']:g} ms, "
          f"{workload['threads']} torch thread, greedy; clients {', '.join(map(str, CLIENTS))} (one prompt a "
          f"request) and 8 asking 8; {args.requests:,} requests a level; {os.cpu_count()} CPUs", flush=True)

    result = {"workload": workload, "in_process": _in_process(recipe, model, prompts, settings.serving)}
    result.update(_gateway(root, registry, prompts, result["in_process"]["batched"]))
    result["kills"] = _kills(root, recipe, settings, args.kills, args.feedback)
    print(_table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(json.dumps({"at": time.strftime("%Y-%m-%d %H:%M:%S"), **result}) + "\n")


def _span(values: list[int]) -> str:
    return f"{values[0]}-{values[-1]}" if values == list(range(values[0], values[-1] + 1)) else \
        ",".join(map(str, values))


def _in_process(recipe, model, prompts: list[str], serving) -> dict:
    import torch

    torch.set_num_threads(serving.threads)  # as many as the gateway's forward pass gets
    batch = serving.max_batch
    recipe.answer(model, prompts[:batch])  # warm
    t = time.perf_counter()
    for start in range(0, len(prompts), batch):
        recipe.answer(model, prompts[start:start + batch])
    batched = len(prompts) / (time.perf_counter() - t)
    singles = []
    for p in prompts[:SINGLES]:
        t = time.perf_counter()
        recipe.answer(model, [p])
        singles.append(time.perf_counter() - t)
    single = {"answers_per_s": 1 / statistics.mean(singles), "p50_ms": _ms(singles, 50)}
    print(f"in process: {batched:,.0f} answers/s in batches of {batch}; one prompt at a time "
          f"{single['answers_per_s']:,.0f}/s, p50 {single['p50_ms']:.1f} ms{_load()}", flush=True)
    return {"batched": batched, "single": single, "load": os.getloadavg()[0]}


def _gateway(root: Path, registry, prompts: list[str], in_process: float) -> dict:
    import httpx

    from rmi_pipeline.serving.process import running_gateway, wait_ready

    rows = []
    with running_gateway(log_file=root / "serve.log") as (url, process):
        wait_ready(url, "1")
        rids: list[str] = []
        for clients, per_request in [(c, 1) for c in CLIENTS] + [(8, 8)]:
            asked = prompts[:min(len(prompts), ONE_CLIENT)] if clients == 1 else prompts
            before, cpu = _batches(url), (_cpu_seconds(process.pid), _cpu_seconds())
            rate, latencies, failed, got = asyncio.run(_answers(url, asked, clients, per_request=per_request))
            after = _batches(url)
            answered = len(latencies) * per_request
            gateway_ms, clients_ms = ((_cpu_seconds(pid) - was) * 1000 / max(1, answered)
                                      for pid, was in zip((process.pid, None), cpu, strict=True))
            # what the cores allow: every answer costs the gateway's CPU and the clients' on the same machine
            cap = (os.cpu_count() or 1) * 1000 / (gateway_ms + clients_ms)
            mean_batch = (after[0] - before[0]) / max(1, after[1] - before[1])
            rids = got if clients == max(CLIENTS) and per_request == 1 else rids
            rows.append({"clients": clients, "prompts_per_request": per_request, "answers_per_s": rate,
                         "x_in_process": rate / in_process, "p50_ms": _ms(latencies, 50),
                         "p99_ms": _ms(latencies, 99), "failed": failed, "mean_batch": mean_batch,
                         "gateway_cpu_ms_per_answer": gateway_ms, "clients_cpu_ms_per_answer": clients_ms,
                         "cores_allow_per_s": cap, "load": os.getloadavg()[0]})
            who = f"{clients:2d} clients" + (f" asking {per_request} prompts a request" if per_request > 1 else "")
            print(f"gateway, {who}: {rate:,.0f} answers/s ({rate / in_process:.2f}x in process batched), p50 "
                  f"{rows[-1]['p50_ms']:.1f} ms, p99 {rows[-1]['p99_ms']:.1f} ms, {failed} failed; batches of "
                  f"{mean_batch:.1f} prompts on average; CPU per answer: gateway {gateway_ms:.2f} ms, clients "
                  f"{clients_ms:.2f} ms, so the {os.cpu_count()} cores allow at most {cap:,.0f}/s "
                  f"({cap / in_process:.2f}x){_load()}", flush=True)
        acks, seconds, failed = asyncio.run(_feedback(url, rids, 3000, 64))
        feedback = {"clients": 64, "acknowledged_per_s": len(acks) / seconds, "failed": failed}
        print(f"gateway, 64 clients: {feedback['acknowledged_per_s']:,.0f} feedback events acknowledged/s, "
              f"{failed} failed", flush=True)

        moved: dict[str, float] = {}

        def promote_soon():
            time.sleep(2)
            moved["at"] = time.monotonic()
            registry.promote("2", {"promoted_by": "bench"})

        threading.Thread(target=promote_soon).start()
        _, _, failed, _, first_new, sent = asyncio.run(_answers(url, prompts, 8, watch="2"))
        serving = httpx.get(f"{url}/readyz").json()["model_version"]
        alias = {"requests": sent, "failed": failed, "seconds_to_new_version": first_new - moved["at"],
                 "serving_after": serving}
        print(f"alias moved during load (8 clients, {sent:,} requests): {failed} failed; version 2 answered "
              f"{alias['seconds_to_new_version']:.2f} s after the move (RMI_SERVE_RELOAD_SECONDS=1 plus its load); "
              f"serving v{serving} after", flush=True)
    return {"gateway": rows, "feedback": feedback, "alias_move": alias}


def _cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user and system) a process has used so far: this one (the clients) where `pid` is None."""
    if pid is None:
        used = os.times()
        return used.user + used.system
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14 and 15)


def _load() -> str:
    """The machine's load as a stage ends: on a shared machine, what its figures were measured under."""
    return f" (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)"


def _ms(values: list[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))] * 1000 if ordered else float("nan")


def _batches(url: str) -> tuple[float, float]:
    """(prompts, forward passes) the gateway has decoded so far, from its rmi_batch_prompts histogram."""
    import httpx

    seen = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("rmi_batch_prompts_sum", "rmi_batch_prompts_count"):
            seen[name] = float(value)
    return seen.get("rmi_batch_prompts_sum", float("nan")), seen.get("rmi_batch_prompts_count", float("nan"))


def _session(url: str, clients: int):
    import aiohttp  # the world's client too: httpx's async client costs more than the gateway at 64 connections

    return aiohttp.ClientSession(base_url=url, connector=aiohttp.TCPConnector(limit=clients),
                                 timeout=aiohttp.ClientTimeout(total=60))


async def _answers(url, prompts, clients, watch: str | None = None, per_request: int = 1):
    """Each client asks the next request's prompts once its last is answered. With `watch`, the prompts go round
    until that version has answered for a second (or 120 s passed); the requests sent are returned too."""
    import aiohttp

    requests = [prompts[i:i + per_request] for i in range(0, len(prompts), per_request)]
    latencies, rids, failed, first, sent = [], [], 0, {}, [0]
    give_up = time.monotonic() + 120

    def more() -> bool:
        if not watch:
            return sent[0] < len(requests)
        return time.monotonic() < min(give_up, first.get("at", give_up) + 1.0)

    async with _session(url, clients) as http:
        async def ping():
            async with http.get("/healthz") as reply:
                await reply.read()

        for _ in range(2):  # open every connection before the clock starts
            await asyncio.gather(*(ping() for _ in range(clients)))

        async def client(i):
            nonlocal failed
            while more():
                asked, sent[0] = requests[sent[0] % len(requests)], sent[0] + 1
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
    return (rate, latencies, failed, rids, first.get("at", float("nan")), sent[0]) if watch else \
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


def _kills(root, recipe, settings, kills: int, target: int) -> dict:
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
        # parenthesized: DuckDB's ->> binds looser than AND, which would read (rating IS NOT NULL AND meta) ->> ...
        rated = [r[0] for r in conn.execute("SELECT event_id FROM feedback_events WHERE rating IS NOT NULL AND "
                                            "(meta->>'response_id') IN (SELECT unnest(?))", [rids]).fetchall()]
    figures = {"kills": kills, "acknowledged": len(acked), "lost": len(set(acked) - set(rated)),
               "doubled": len(rated) - len(set(rated)), "set_aside_as_duplicates": counts["duplicates"],
               "beyond_acknowledged": len(rated) - len(set(acked))}
    print(f"kills: {kills} kill -9s while 64 clients sent feedback; {figures['acknowledged']:,} acknowledged, "
          f"{figures['lost']} lost, {figures['doubled']} doubled in the warehouse "
          f"({figures['set_aside_as_duplicates']} repeats the warehouse set aside as duplicates; "
          f"{figures['beyond_acknowledged']:+d} rated events beyond the acknowledged: sent but killed before the 202)",
          flush=True)
    return figures


def _table(result: dict) -> str:
    """The figures as the log's serving entries show them."""
    in_process = result["in_process"]
    lines = ["", "| | answers/s | against in process, batched | p50 | p99 | mean batch |",
             "|---|---|---|---|---|---|",
             f"| in process, batches of {result['workload']['max_batch']} | {in_process['batched']:,.0f} | 1.00x "
             "| | | |",
             f"| in process, one prompt at a time | {in_process['single']['answers_per_s']:,.0f} | "
             f"{in_process['single']['answers_per_s'] / in_process['batched']:.2f}x | "
             f"{in_process['single']['p50_ms']:.1f} ms | | |"]
    for row in result["gateway"]:
        who = f"gateway, {row['clients']} client{'s' if row['clients'] > 1 else ''}" + (
            f" asking {row['prompts_per_request']} prompts" if row["prompts_per_request"] > 1 else "")
        lines.append(f"| {who} | {row['answers_per_s']:,.0f} | {row['x_in_process']:.2f}x | {row['p50_ms']:.1f} ms | "
                     f"{row['p99_ms']:.1f} ms | {row['mean_batch']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
