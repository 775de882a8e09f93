"""Users drift to a slice the champion barely knows: when health flags it, and how the loop brings the slice back.

    python bench/drift.py [--warmup-cycles 2] [--before 1] [--after 5]

In a throwaway RMI_HOME (or --home, which keeps what an earlier run of this bench warmed up): a first model and
--warmup-cycles improvement cycles (`rmi run`), then the live world lands batches from users of the last warm-up
cycle. After --before batches, half of the users move to the slice the world picks, as
`rmi simulate --live --scenario drift` does. After each batch the jobs run as the daemon starts them: ingest, a health
check (health_after_ingest), then regression_sensor or else enough_feedback_sensor and the cycle it asks for, with its
config and tags, then a health check (health_after_cycle). The regression backoff is 0: this counts cycles, not
minutes. It prints when the drift started, when health flagged it, the regression-triggered runs with their tags,
and the drifted slice's eval score and live thumbs-down rate per cycle against their levels before the drift.
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup-cycles", type=int, default=2)
    parser.add_argument("--before", type=int, default=1, help="batches before the drift")
    parser.add_argument("--after", type=int, default=5, help="batches after the drift starts")
    parser.add_argument("--home", type=Path, help="a home an earlier run of this bench warmed up: no warm-up")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="rmi-drift-")) / "home"
    os.environ["RMI_HOME"] = str(home)
    os.environ["RMI_REGRESSION_BACKOFF_SECONDS"] = "0"
    os.environ.setdefault("RMI_PROMOTION", "offline")  # the time to a fix through the gate, not a live trial
    from dagster import DagsterInstance, RunRequest, build_sensor_context

    from rmi_pipeline.automation.in_process import QUIET_LOGS, ingest_new_batches
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.cli.main import main as rmi
    from rmi_pipeline.definitions import build_definitions
    from rmi_pipeline.recipes.base import slice_name
    from rmi_pipeline.settings import Settings
    from rmi_pipeline.world import World
    from rmi_pipeline.world.live import choose_drift
    from rmi_pipeline.world.users import usual_tiers

    started = time.perf_counter()
    if args.home is None:
        print(f"drift: first model and {args.warmup_cycles} cycles in {home} ...", flush=True)
        rmi(["run", "--cycles", str(args.warmup_cycles)])
    else:
        prepare_home(Settings())
    settings = Settings()
    defs = build_definitions(settings)
    instance = DagsterInstance.get()
    import atexit
    from contextlib import ExitStack

    from rmi_pipeline.serving.process import running_gateway, wait_ready

    gateway = ExitStack()  # the users' way in, stopped when the bench ends
    atexit.register(gateway.close)
    url, _ = gateway.enter_context(running_gateway({"RMI_SERVE_RELOAD_SECONDS": "1"}))
    world = World(settings, url)
    cycle = args.warmup_cycles
    usual = [slice_name(s, t) for s in world.recipe.skills for t in usual_tiers(world.recipe, cycle) if t > 1]

    def health(trigger: str) -> dict:
        result = defs.resolve_job_def("health_check").execute_in_process(
            instance=instance, run_config=QUIET_LOGS, tags={"rmi/trigger": trigger})
        [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.path == ["champion_health"]]
        return {k: v.value for k, v in event.materialization.metadata.items()}

    def tick(name: str):
        return defs.resolve_sensor_def(name)(build_sensor_context(
            instance=instance, resources={"notifier": defs.resources["notifier"]} if name == "regression_sensor"
            else None))

    def champion() -> str:
        return str(world.registry.version("champion").version)

    drift = flagged = None
    stamp = time.time()  # a rerun on the same home draws new users
    served_by: list[str] = []
    batches, cycles = [], []
    for n in range(args.before + args.after):
        if n == args.before:
            drift = choose_drift(world, cycle)
            print(f"[batch {n + 1}] drift starts: {drift.share:.0%} of users ask {drift.slice}; champion "
                  f"v{champion()} is right {drift.accuracy:.0%} there", flush=True)
        t = time.perf_counter()
        rng = random.Random(f"users-{settings.seed}-{cycle}-bench-{stamp}-{n}")
        wait_ready(url, champion())
        names, stats = world.serve(cycle, rng, drift)
        served_by.append(str(stats["champion_version"]))
        ingest_new_batches(defs, instance)
        h = health("ingest")
        seconds = time.perf_counter() - t
        row = {"batch": n + 1, "drifted": drift is not None, "champion": served_by[-1],
               "served_accuracy": round(stats["served_accuracy"], 3), "regressed": h["regressed"],
               "regressed_slices": h["regressed_slices"], "live_thumbs_down": h.get("live_thumbs_down"),
               "baseline_thumbs_down": h.get("baseline_thumbs_down"), "seconds_landing_to_verdict": round(seconds, 1),
               "eval_usual": sum(h[f"eval {s}"] for s in usual) / len(usual)}
        if drift:
            row |= {"drift_eval": h.get(f"eval {drift.slice}"),
                    "drift_thumbs_down": h.get(f"thumbs_down {drift.slice}")}
            if flagged is None and drift.slice in h["regressed_slices"]:
                flagged = row
        batches.append(row)
        print(f"[batch {n + 1}] {json.dumps(row)}", flush=True)
        request = tick("regression_sensor")
        if not isinstance(request, RunRequest):
            request = tick("enough_feedback_sensor")
        if isinstance(request, RunRequest):
            before = champion()
            t = time.perf_counter()
            result = defs.resolve_job_def("improvement_cycle").execute_in_process(
                instance=instance, raise_on_error=False, run_config={**QUIET_LOGS, **(request.run_config or {})},
                tags={**request.tags, "rmi/cycle": f"live-{n + 1}"})
            ev = {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
                  for e in result.get_asset_materialization_events()}
            after = health("cycle")
            c = {"after_batch": n + 1, "drifted": drift is not None, "tags": {k: v for k, v in request.tags.items()},
                 "verdict": ev.get("candidate_evaluation", {}).get("verdict", "failed"),
                 "gain": ev.get("candidate_evaluation", {}).get("gain"), "champion_before": before,
                 "champion_after": champion(), "seconds": round(time.perf_counter() - t, 1),
                 "steps": ev.get("candidate_model", {}).get("steps_done"),
                 "eval_usual": sum(after[f"eval {s}"] for s in usual) / len(usual)}
            if drift:
                c["drift_eval"] = after.get(f"eval {drift.slice}")
            cycles.append(c)
            print(f"[cycle after batch {n + 1}] {json.dumps(c)}", flush=True)

    print(f"\ndrift bench, {time.perf_counter() - started:.0f} s in all; RMI_TRAIN_STEPS={settings.training.steps}, "
          f"RMI_SIM_QUERIES_PER_CYCLE={settings.simulation.queries_per_cycle}, tolerance {settings.health.tolerance}")
    drift_batch = args.before
    pre = [b for b in batches if not b["drifted"]][-1]
    print(f"drift: from batch {drift_batch + 1}, {drift.share:.0%} of users ask {drift.slice} (champion right "
          f"{drift.accuracy:.0%} of the time there when it started)")
    print(f"before the drift: live thumbs-down {pre['live_thumbs_down']:.3f} over all slices; eval on the usual "
          f"slices {pre['eval_usual']:.3f}")
    if flagged:
        print(f"health flagged {drift.slice} in the check after batch {flagged['batch']} "
              f"({flagged['batch'] - drift_batch - 1} batches after the first drifted one), "
              f"{flagged['seconds_landing_to_verdict']:.1f} s after it landed: thumbs-down "
              f"{flagged['drift_thumbs_down']:.3f} vs {flagged['baseline_thumbs_down']:.3f}")
    else:
        print(f"health never flagged {drift.slice}")
    print("\ncycles after the drift (eval of the champion after each cycle on the drifted slice):")
    for i, c in enumerate([c for c in cycles if c["drifted"]], 1):
        tags = ", ".join(f"{k}={v}" for k, v in c["tags"].items() if k != "rmi/champion")
        print(f"  {i}. {tags}: {c['verdict']} (gain {c['gain']}), champion v{c['champion_before']} -> "
              f"v{c['champion_after']}, {c['drift_eval']:.3f} on {drift.slice} (usual slices "
              f"{c['eval_usual']:.3f}), {c['steps']} steps, {c['seconds']:.0f} s")
    print("\nlive thumbs-down on the drifted slice per batch (the champion that served it):")
    for b in batches:
        if b["drifted"]:
            print(f"  batch {b['batch']}: v{b['champion']} {b['drift_thumbs_down']}; all slices "
                  f"{b['live_thumbs_down']:.3f}; regressed: {b['regressed_slices']}")
    (home / "drift.json").write_text(json.dumps({"batches": batches, "cycles": cycles, "drift": vars(drift)}, indent=1))
    print(f"\n{home / 'drift.json'}")


if __name__ == "__main__":
    sys.exit(main())
