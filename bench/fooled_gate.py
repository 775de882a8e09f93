"""A world that fools the offline gate, end to end: through `rmi serve` and the Dagster daemon, the canary catches it.

    python bench/fooled_gate.py [--warmup-cycles 1] [--interval 20] [--minutes 20]

In a throwaway RMI_HOME: a first model and --warmup-cycles improvement cycles (`rmi run`, promoting offline), then
`rmi ui` (the Dagster webserver and daemon, every sensor on) and `rmi simulate --live --scenario partner
--scenario-after 0` (its own `rmi serve`, so RMI_PROMOTION=auto trials every passing challenger as a canary): from the
first batch, a fifth of the questions come from a partner app whose client sends a wrong correction (the true
answer + 1) with every rating. Nothing else drives the loop: the daemon ingests each batch, starts a cycle on enough
new feedback, the gate judges the challenger trained on the partner's corrections, canary_sensor judges its canary
on the next batches. It prints the timeline (partner joined, challenger trained, the gate's verdict, canary start,
canary verdict), the thumbs-down each arm's users gave while the canary served, and both models on fresh partner
questions and on questions drawn as the eval draws them (what only the benchmark can see).
"""

import argparse
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RMI = str(Path(sys.executable).parent / "rmi")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warmup-cycles", type=int, default=1)
    parser.add_argument("--interval", type=float, default=20.0, help="seconds between the world's batches")
    parser.add_argument("--queries", type=int, default=4000, help="questions per batch")
    parser.add_argument("--minutes", type=float, default=20.0, help="give up after this long")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="rmi-fooled-")) / "home"
    env = {**os.environ, "RMI_HOME": str(home), "RMI_SIM_QUERIES_PER_CYCLE": str(args.queries),
           "RMI_CANARY_SHARE": "0.5", "RMI_SERVE_RELOAD_SECONDS": "1",
           "RMI_CYCLE_MIN_NEW_EVENTS": str(args.queries // 2)}
    os.environ.update(env)
    t0 = time.time()
    print(f"fooled gate: first model and {args.warmup_cycles} cycles in {home} (offline promotion) ...", flush=True)
    subprocess.run([RMI, "run", "--cycles", str(args.warmup_cycles)], check=True, stdout=subprocess.DEVNULL,
                   env={**env, "RMI_PROMOTION": "offline"})
    print(f"  warm-up done in {time.time() - t0:.0f} s", flush=True)

    from rmi_pipeline.assets.promotion import STARTED_AT
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.resources import build_resources, layout
    from rmi_pipeline.resources.registry import CANARY, CHAMPION
    from rmi_pipeline.settings import Settings

    settings = Settings()
    prepare_home(settings)
    resources = build_resources(settings)
    registry, storage = resources["registry"], resources["storage"]
    warm = str(registry.version(CHAMPION).version)
    logs = home / "bench-logs"
    logs.mkdir()
    daemon = _start([RMI, "ui", "--port", str(_free_port())], env, logs / "ui.log")
    world = _start([RMI, "simulate", "--live", "--scenario", "partner", "--scenario-after", "0", "--cycle", "2",
                    "--interval", str(args.interval)], env, logs / "world.log")
    start = time.time()
    events: dict[str, float] = {"partner joined": start}
    trial, verdict = None, None
    try:
        while time.time() - start < args.minutes * 60 and verdict is None:
            time.sleep(2)
            for proc, name in ((daemon, "rmi ui"), (world, "the live world")):
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} stopped (rc {proc.returncode}); see {logs}")
            canary = registry.version(CANARY)
            if trial is None and canary is not None:
                trial = canary
                events[f"v{canary.version} trained and passed the gate"] = _registered_at(canary)
                events[f"canary v{canary.version} started"] = float(canary.tags[STARTED_AT])
                print(f"  [{time.time() - start:5.0f} s] canary v{canary.version} on trial", flush=True)
            if trial is not None and storage.exists(layout.canary_verdict(str(trial.version))):
                said = storage.read_json(layout.canary_verdict(str(trial.version)))
                if said["action"] != "wait":
                    verdict = said
                    events[f"canary verdict: {said['action']}"] = time.time()
    finally:
        for proc in (world, daemon):
            _stop(proc)
    if verdict is None:
        sys.exit(f"no canary verdict within {args.minutes:g} minutes; see {logs}")
    version = str(trial.version)
    print(f"\nfooled gate: champion v{warm} from the warm-up; challenger v{version} trained on the partner's "
          f"corrections; home {home}\n")
    print("| when (s after the partner joined) | what |\n|---:|---|")
    for what, at in sorted(events.items(), key=lambda kv: kv[1]):
        print(f"| {at - start:.0f} | {what} |")
    tags = registry.client().get_model_version(registry.model_name, version).tags
    print(f"\ngate on v{version}: anchor mean {tags.get('eval_anchor_mean')} (champion v{warm}: "
          f"{registry.client().get_model_version(registry.model_name, warm).tags.get('eval_anchor_mean')})")
    print(f"canary verdict after {verdict['hours'] * 3600:.0f} s on trial: {verdict['reason']}")
    print("\nthumbs-down users gave while the canary served (the world's own count of its batches):")
    print(_arms_table(logs / "world.log", version))
    print("\nboth models on 1,000 fresh questions of each kind (the truth, which only the benchmark has):")
    print(_accuracy_table(settings, registry, warm, version))
    print(f"\ntotal {time.time() - t0:.0f} s")


def _arms_table(world_log: Path, canary: str) -> str:
    """Per batch line of the world's log where the canary answered: answers and thumbs-down share per version."""
    rows = ["| batch | arm | answers | thumbs-down |", "|---:|---|---:|---:|"]
    for line in world_log.read_text().splitlines():
        batch = re.search(r"batch (\d+): \d+ questions \((.*?)\), right", line)
        if batch and f"v{canary} " in batch.group(2):
            for version, n, down in re.findall(r"v(\d+) ([\d,]+) \((\d+)% down\)", batch.group(2)):
                arm = "canary" if version == canary else "champion"
                rows.append(f"| {batch.group(1)} | {arm} v{version} | {n} | {down}% |")
    return "\n".join(rows)


def _accuracy_table(settings, registry, champion: str, challenger: str) -> str:
    from rmi_pipeline.recipes.base import load_recipe
    from rmi_pipeline.world.users import usual_tiers

    recipe = load_recipe(settings.recipe)
    rng = random.Random(1)
    uniform = recipe.sample_tasks(rng, 1000, list(recipe.skills), usual_tiers(recipe, 2))
    partner = [p[0] for p in (recipe.partner_task(t, rng) for t in recipe.sample_tasks(
        rng, 2000, list(recipe.skills), usual_tiers(recipe, 2))) if p][:1000]
    rows = ["| model | partner questions right | questions drawn as the eval draws them right |", "|---|---:|---:|"]
    for name, version in (("champion", champion), ("challenger (canary)", challenger)):
        model = registry.load(version, recipe)
        scores = [sum(recipe.correct(model, tasks)) / len(tasks) for tasks in (partner, uniform)]
        rows.append(f"| {name} v{version} | {scores[0]:.3f} | {scores[1]:.3f} |")
    return "\n".join(rows)


def _registered_at(version) -> float:
    return version.creation_timestamp / 1000


def _start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to the process group (the world lets its batch land, dagster dev stops its children), then kill."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
