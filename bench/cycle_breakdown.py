"""Where one improvement cycle spends its time: model compute against orchestration.

    python bench/cycle_breakdown.py            (or `make bench`)

In a throwaway RMI_HOME it trains a first model, lets simulated users give one batch of feedback, then
times one cycle: the world, the ingest run and the improvement_cycle run, each Dagster step, and inside
them the model's compute: Lightning's fit, batched decoding on the eval suite, and practice (the champion
decoding its successor's problems, the verifier scoring them). What a process of the loop pays once (imports, the
warm training worker's start, opening the warehouse, moving what it loaded out of the garbage collector's reach) is
paid before the timed cycle, as `rmi run` pays it once for all its cycles. Everything else in the wall time - Dagster
runs and events, MLflow calls, validation, file I/O, process start-up - is orchestration. Part of it is Dagster's own
floor, measured beside it: runs of as many empty steps on the same instance, which no code of the loop's can remove.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="rmi-bench-"))
    os.environ["RMI_HOME"] = str(home)
    os.environ.setdefault("RMI_PROMOTION", "offline")  # one cycle's stages, not a live trial
    from rmi_pipeline.automation.in_process import QUIET_LOGS, ingest_new_batches, keep_what_is_loaded
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.settings import Settings

    settings = Settings()
    prepare_home(settings)
    started = time.perf_counter()
    from dagster import DagsterInstance

    from rmi_pipeline.definitions import build_definitions
    from rmi_pipeline.world import World

    defs = build_definitions(settings)
    load_seconds = time.perf_counter() - started
    instance = DagsterInstance.get()
    World(settings).ensure_eval_suite()
    cycle_job = defs.resolve_job_def("improvement_cycle")
    print(f"bench: first model in {home} ...", flush=True)
    cycle_job.execute_in_process(instance=instance, run_config=QUIET_LOGS)
    # what a process pays once, as torch's import and the warm training worker's start: `rmi run` opens the warehouse
    # in its first ingest and keeps it open for every cycle after (0.2-0.3 s)
    from rmi_pipeline.resources import build_resources

    build_resources(settings)["warehouse"].migrate()
    keep_what_is_loaded()  # as `rmi run` after its first model

    print("bench: timing one improvement cycle ...", flush=True)
    wall = time.perf_counter()
    t = time.perf_counter()
    from rmi_pipeline.serving.process import running_gateway, wait_ready

    with running_gateway() as (url, _):  # users reach the champion through `rmi serve`, as in `rmi run`
        wait_ready(url, None)
        World(settings, url).serve_cycle(1)
    world_seconds = time.perf_counter() - t
    t = time.perf_counter()
    batches = ingest_new_batches(defs, instance)["batches"]
    ingest_seconds = time.perf_counter() - t
    t = time.perf_counter()
    result = cycle_job.execute_in_process(instance=instance, run_config=QUIET_LOGS)
    cycle_seconds = time.perf_counter() - t
    wall = time.perf_counter() - wall

    meta = {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
            for e in result.get_asset_materialization_events()}
    fit = meta["candidate_model"]["train_seconds"]
    # the champion answering the suite's edge (eval_suite) is evaluation compute too
    decode = meta["candidate_evaluation"]["eval_compute_seconds"] + meta["eval_suite"]["growth_compute_seconds"]
    practise = meta["practice"].get("practice_compute_seconds", 0.0)
    steps = {s.step_key: s.end_time - s.start_time for s in instance.get_run_step_stats(result.run_id)}
    compute = fit + decode + practise
    rows = [
        ("world: a gateway starts, users query it (simulation)", world_seconds),
        ("ingest run (validation, warehouse, Dagster)", ingest_seconds),
        ("improvement_cycle run", cycle_seconds),
        *((f"  step {k}", v) for k, v in steps.items()),
        ("  of which Lightning fit", fit),
        ("  of which eval decoding (the suite's edge, the gate's items)", decode),
        ("  of which practice (the champion decoding, the verifier)", practise),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"\n{'stage'.ljust(width)}  seconds")
    for name, seconds in rows:
        print(f"{name.ljust(width)}  {seconds:7.2f}")
    pipeline = wall - world_seconds
    print(f"\ncycle wall time (without the simulated world): {pipeline:.1f} s")
    print(f"model compute (training, evaluation, practice): {compute:.1f} s = {compute / pipeline:.1%}")
    print(f"orchestration (Dagster, MLflow, validation, I/O): {pipeline - compute:.2f} s "
          f"= {(pipeline - compute) / pipeline:.1%}; counting practice as orchestration: "
          f"{(pipeline - compute + practise) / pipeline:.0%}")
    cycle_floor = dagster_floor(instance, len(steps), QUIET_LOGS)
    ingest_steps = len(defs.resolve_job_def("ingest_feedback").nodes_in_topological_order)
    ingest_floor = dagster_floor(instance, ingest_steps, QUIET_LOGS)
    floor = cycle_floor + batches * ingest_floor
    print(f"  of which Dagster's floor: {floor:.1f} s (a run of {len(steps)} empty steps on this instance "
          f"{cycle_floor:.2f} s, and {batches} ingest run(s) of empty steps, {ingest_floor:.2f} s each); the loop's "
          f"own: {pipeline - compute - floor:.1f} s")
    print(f"loading the definitions in this process: {load_seconds:.2f} s")
    probe = subprocess.run([sys.executable, "-c", "import time; t=time.perf_counter(); "
                            "import rmi_pipeline.definitions; print(time.perf_counter()-t)"],
                           capture_output=True, text=True, check=True)
    print(f"process start-up, definitions in a fresh process (paid per run under the daemon): "
          f"{float(probe.stdout):.2f} s")
    from rmi_pipeline.training.worker import stop_training_workers

    stop_training_workers(home)  # the warm training worker the cycle used: nothing left running


def dagster_floor(instance, steps: int, run_config: dict) -> float:
    """Seconds of one run of `steps` empty assets in a chain on `instance` (the median of three after a first):
    run creation, its events and the step framework, which every run of the loop pays whatever its steps do."""
    from dagster import AssetsDefinition, asset, materialize

    chain: list[AssetsDefinition] = []
    for i in range(steps):
        @asset(name=f"empty_{steps}_{i}", deps=chain[-1:])
        def empty() -> None:
            return None
        chain.append(empty)
    seconds = []
    for _ in range(4):
        started = time.perf_counter()
        materialize(chain, instance=instance, run_config=run_config)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds[1:])


if __name__ == "__main__":
    main()
