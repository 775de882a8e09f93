"""What `rmi serve --upstream` adds to an engine's latency: the same requests to the engine alone and through the
gateway in front of it, in one run (the differences and ratios are the figures).

    python bench/upstream.py [--requests 300] [--clients 1,8] [--out bench-upstream.jsonl]

The engine is `rmi serve` itself over the arithmetic recipe's untrained "tiny" model (its own speed is not under
test, only what the gateway in front of it adds); the gateway in front records every answer in its log as it would
in front of vLLM. Both run on 127.0.0.1 as processes of their own, on this machine's cores with the client.

Workload, fixed: the recipe's sums and differences (tiers 1-4 digits, seed 0), one prompt a request, `temperature`
0, as plain completions and as streamed ones, from 1 and 8 concurrent clients (`--clients`); each level asks the
engine, then the gateway, the same requests in the same order, twice over in alternating rounds (engine, gateway,
engine, gateway), so a change in the machine's load falls on both. Per level: p50 and p99 latency of each (a stream:
to its last byte), what the gateway adds (ms), the ratios, and the CPU time the gateway's process spends on a
request (while it is asked, less its idle use while the engine alone is); the machine's load average is printed
with them, since the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RECIPE = "rmi_pipeline.recipes.arithmetic:ArithmeticRecipe"
ENGINE = {"RMI_SERVE_MAX_BATCH": "64", "RMI_SERVE_MAX_WAIT_MS": "5", "RMI_SERVE_THREADS": "1",
          "RMI_SERVE_EXPLORE_SHARE": "0", "RMI_SERVE_SHADOW": "false", "RMI_SERVE_API_KEYS": "",
          "RMI_CANARY_SHARE": "0"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per level and target (in two rounds)")
    parser.add_argument("--clients", default="1,8", help="concurrent clients, comma-separated")
    parser.add_argument("--out", type=Path, help="append the workload and figures here as one JSON line")
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bench-upstream-"))
    os.environ.update(MLFLOW_DISABLE_TELEMETRY="true", RMI_RECIPE=RECIPE, **ENGINE)
    engine_env = {"RMI_HOME": str(root / "engine"), "DAGSTER_HOME": str(root / "engine" / "dagster")}
    os.environ.update(engine_env)
    import torch

    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.recipes.base import load_recipe
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.serving.process import running_gateway, wait_ready
    from rmi_pipeline.settings import Settings

    settings = Settings()
    prepare_home(settings)
    recipe, registry = load_recipe(settings.recipe), build_resources(settings)["registry"]
    torch.manual_seed(1)
    with registry.run("bench", tags={}) as run_id:
        registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1, size="tiny")), RECIPE, {})
    registry.promote("1", {"promoted_by": "bench"})
    prompts = [t.prompt for t in recipe.sample_tasks(random.Random(0), args.requests, list(recipe.skills),
                                                     [1, 2, 3, 4])]
    name = settings.model_name
    proxy_env = {"RMI_HOME": str(root / "proxy"), "DAGSTER_HOME": str(root / "proxy" / "dagster"),
                 "RMI_MLFLOW_TRACKING_URI": settings.resolved_tracking_uri,
                 "RMI_SERVE_UPSTREAM_CHAMPION_MODEL": f"{name}@champion"}
    workload = {"recipe": recipe.name, "tiers": [1, 2, 3, 4], "seed": 0, "model_size": "tiny", "trained": False,
                "requests": args.requests, "clients": clients, "cpus": os.cpu_count(), "engine": "rmi serve"}
    print(f"workload: {recipe.name} recipe, tiers 1-4, seed 0, untrained tiny model behind `rmi serve` as the "
          f"engine; {args.requests} requests a level and target, clients {args.clients}; {os.cpu_count()} CPUs; "
          f"load average before {_load()}", flush=True)
    rows = []
    with running_gateway(engine_env, log_file=root / "engine.log") as (engine, engine_process):
        wait_ready(engine, "1")
        with running_gateway(proxy_env, log_file=root / "proxy.log", args=("--upstream", f"{engine}/v1")) as (
                proxy, proxy_process):
            wait_ready(proxy, "1")
            pids = {"engine": engine_process.pid, "gateway": proxy_process.pid}
            targets = {"engine": (engine, f"{name}@champion"), "gateway": (proxy, name)}
            for stream in (False, True):
                for n in clients:
                    asyncio.run(_level(targets["engine"], prompts[:20], n, stream))  # warm both connections
                    asyncio.run(_level(targets["gateway"], prompts[:20], n, stream))
                    got: dict[str, list[float]] = {"engine": [], "gateway": []}
                    cpu = {"engine": 0.0, "gateway": 0.0}  # the gateway's own CPU while the gateway is asked
                    half = len(prompts) // 2
                    for part in (prompts[:half], prompts[half:]):
                        for target in ("engine", "gateway"):
                            before = _cpu(pids["gateway"])
                            got[target] += asyncio.run(_level(targets[target], part, n, stream))
                            cpu[target] += _cpu(pids["gateway"]) - before
                    rows.append(_row(got, n, stream, (cpu["gateway"] - cpu["engine"]) / len(prompts)))
    print(_table(rows))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(json.dumps({"at": time.strftime("%Y-%m-%d %H:%M:%S"), "workload": workload, "rows": rows}) + "\n")


async def _level(target: tuple[str, str], prompts: list[str], clients: int, stream: bool) -> list[float]:
    """Each request's seconds, `clients` at a time over the prompts; a failed request fails the run."""
    import httpx

    url, model = target
    queue = list(enumerate(prompts))
    latencies: list[float] = []

    async def client(http: httpx.AsyncClient) -> None:
        while queue:
            _, prompt = queue.pop()
            body = {"model": model, "prompt": prompt, "temperature": 0, "user": "bench", "stream": stream}
            started = time.perf_counter()
            if stream:
                async with http.stream("POST", "/v1/completions", json=body) as reply:
                    text = b"".join([part async for part in reply.aiter_bytes()])
                    assert reply.status_code == 200 and text.rstrip().endswith(b"data: [DONE]"), text[-200:]
            else:
                reply = await http.post("/v1/completions", json=body)
                assert reply.status_code == 200, reply.text[:200]
            latencies.append(time.perf_counter() - started)

    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return latencies


def _ms(values: list[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000


def _cpu(pid: int) -> float:
    """CPU seconds the process has used (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _row(got: dict[str, list[float]], clients: int, stream: bool, cpu_s: float) -> dict:
    engine, gateway = got["engine"], got["gateway"]
    row = {"stream": stream, "clients": clients, "requests": len(engine), "gateway_cpu_ms": cpu_s * 1000,
           "load_average": _load()}
    for q in (50, 99):
        row[f"engine_p{q}_ms"], row[f"gateway_p{q}_ms"] = _ms(engine, q), _ms(gateway, q)
        row[f"added_p{q}_ms"] = row[f"gateway_p{q}_ms"] - row[f"engine_p{q}_ms"]
        row[f"ratio_p{q}"] = row[f"gateway_p{q}_ms"] / row[f"engine_p{q}_ms"]
    print(f"{'stream' if stream else 'plain '} {clients:2d} clients: engine p50 {row['engine_p50_ms']:.1f} ms p99 "
          f"{row['engine_p99_ms']:.1f} ms; through the gateway p50 {row['gateway_p50_ms']:.1f} ms p99 "
          f"{row['gateway_p99_ms']:.1f} ms (+{row['added_p50_ms']:.1f} / +{row['added_p99_ms']:.1f} ms, "
          f"{row['ratio_p50']:.2f}x / {row['ratio_p99']:.2f}x); the gateway's CPU {row['gateway_cpu_ms']:.1f} ms a "
          f"request; load {row['load_average']}", flush=True)
    return row


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _table(rows: list[dict]) -> str:
    lines = ["| request | clients | engine p50 / p99 ms | through the gateway p50 / p99 ms | added p50 / p99 ms | "
             "ratio p50 / p99 | the gateway's CPU a request | load average |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {'streamed' if r['stream'] else 'plain'} | {r['clients']} | {r['engine_p50_ms']:.1f} / "
                     f"{r['engine_p99_ms']:.1f} | {r['gateway_p50_ms']:.1f} / {r['gateway_p99_ms']:.1f} | "
                     f"{r['added_p50_ms']:+.1f} / {r['added_p99_ms']:+.1f} | {r['ratio_p50']:.2f} / "
                     f"{r['ratio_p99']:.2f} | {r['gateway_cpu_ms']:.1f} ms | {r['load_average']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
