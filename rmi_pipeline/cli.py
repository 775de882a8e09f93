"""`rmi`: run the whole loop against the simulated world, open the UI, or look at where things stand.

    rmi run [--cycles 5] [--fresh]   world -> feedback -> pipeline, N improvement cycles after a first model
    rmi ui [--port 3000]             the Dagster UI over RMI_HOME (sensors on)
    rmi simulate --cycle N           one batch of user feedback from the current champion
    rmi simulate --live [--scenario drift]   a batch every --interval seconds until Ctrl-C
    rmi status                       champion, challenger, warehouse and recent runs
    rmi feedback ingest PATH         validate a local batch file and land it in the warehouse now
    rmi feedback stats               thumbs-down rates, corrections and failing prompts
    rmi promote VERSION --reason T   a person overrides the gate (audited)
    rmi rollback --reason T          back to the previous champion (audited)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from .settings import Settings

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE = ("store", "dagster", "mlartifacts", "mlflow.db", "warehouse.duckdb", "learning_curve.png",
         "run_summary.json")
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def prepare_home(settings: Settings, fresh: bool = False) -> Path:
    """RMI_HOME with Dagster's instance inside it; `fresh` removes only what the loop itself wrote."""
    home = settings.resolved_home
    template = REPO_ROOT / "dagster.yaml"
    if settings.dagster_yaml is not None:  # e.g. deploy/dagster.yaml: its env vars stay env vars, read by Dagster
        template = settings.dagster_yaml.expanduser()
        if not template.is_file():
            raise FileNotFoundError(f"RMI_DAGSTER_YAML={template} is not a file")
    if fresh:
        for name in STATE:
            target = home / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    settings.dagster_home.mkdir(parents=True, exist_ok=True)
    config = settings.dagster_home / "dagster.yaml"
    if template.exists():
        shutil.copyfile(template, config)
    elif not config.exists():
        config.write_text("telemetry:\n  enabled: false\n")
    os.environ["RMI_HOME"] = str(home)  # runs and `dagster dev` children see the same settings
    os.environ["DAGSTER_HOME"] = str(settings.dagster_home)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    return home


def say(message: str) -> None:
    print(message, flush=True)


def cmd_run(args) -> int:
    settings = Settings()
    home = prepare_home(settings, fresh=args.fresh)
    say(f"rmi run: {args.cycles} improvement cycles after a first model; state in {home}")
    from dagster import DagsterInstance

    from .definitions import build_definitions
    from .report import CycleRecord, learning_curve, summary_table, write_summary
    from .world import World

    defs = build_definitions(settings)
    instance = DagsterInstance.get()
    world = World(settings)
    if world.ensure_eval_suite():
        say("curators wrote the private eval suite")
    records: list[CycleRecord] = []
    started = time.perf_counter()
    for cycle in range(args.cycles + 1):
        record = CycleRecord(cycle=cycle)
        if cycle > 0:
            t = time.perf_counter()
            batch, record.world = world.serve_cycle(cycle)
            record.seconds["world"] = time.perf_counter() - t
            say(f"[cycle {cycle}] users asked {record.world['queries']} questions of champion "
                f"v{record.world['champion_version']} (right {record.world['served_accuracy']:.0%}); "
                f"batch {batch} landed")
            t = time.perf_counter()
            record.ingest = ingest_new_batches(defs, instance)
            record.seconds["ingest"] = time.perf_counter() - t
            say(f"[cycle {cycle}] ingested: {record.ingest}")
        say(f"[cycle {cycle}] improvement cycle: dataset -> training -> evaluation -> gate")
        result = defs.resolve_job_def("improvement_cycle").execute_in_process(
            instance=instance, raise_on_error=False, run_config=QUIET_LOGS,
            tags={"rmi/cycle": str(cycle), "rmi/trigger": "rmi-run"})
        record.read_cycle_run(result, instance)
        say(record.progress_line())
        if not result.success:
            say(f"[cycle {cycle}] the cycle run failed; the champion did not move. See `make ui`, run "
                f"{result.run_id}.")
        records.append(record)
        if cycle == 0 and world.registry.version("champion") is None:
            say("[cycle 0] no first model reached the floor, so nothing can serve users yet; try more "
                "RMI_BOOTSTRAP_STEPS or a lower RMI_GATE_FIRST_FLOOR")
            break
    say("")
    say(summary_table(records))
    png = learning_curve(records, home / "learning_curve.png")
    write_summary(records, home / "run_summary.json")
    say(f"\nlearning curve: {png}\nsummary: {home / 'run_summary.json'}\n"
        f"total {time.perf_counter() - started:.0f} s; `make ui` shows every run and the lineage")
    return 0 if all(r.success for r in records) else 1


def ingest_new_batches(defs, instance) -> dict:
    """One tick of new_feedback_sensor, with its runs executed here rather than by the daemon."""
    from dagster import build_sensor_context

    sensor = defs.resolve_sensor_def("new_feedback_sensor")
    result = sensor(build_sensor_context(instance=instance, resources={"storage": defs.resources["storage"]}))
    totals = {"batches": 0, "rows_in": 0, "ingested": 0, "duplicates": 0, "quarantined": 0, "failed": 0}
    if not hasattr(result, "run_requests"):
        return totals
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    job = defs.resolve_job_def("ingest_feedback")
    for run in result.run_requests or []:
        out = job.execute_in_process(instance=instance, partition_key=run.partition_key, raise_on_error=False,
                                     run_config=QUIET_LOGS, tags=dict(run.tags))
        totals["batches"] += 1
        totals["failed"] += not out.success
        for event in out.get_asset_materialization_events():
            if event.asset_key.to_user_string() == "feedback_events":
                meta = event.materialization.metadata
                for key in ("rows_in", "ingested", "duplicates", "quarantined"):
                    totals[key] += meta[key].value
    return totals


def cmd_ui(args) -> int:
    settings = Settings()
    prepare_home(settings)
    dagster = shutil.which("dagster", path=str(Path(sys.executable).parent)) or "dagster"
    target = ["-w", "workspace.yaml"] if Path("workspace.yaml").exists() else ["-m", "rmi_pipeline.definitions"]
    say(f"Dagster UI on http://127.0.0.1:{args.port} over {settings.resolved_home} (Ctrl-C stops it)")
    os.execv(dagster, [dagster, "dev", *target, "-h", "127.0.0.1", "-p", str(args.port)])


def cmd_simulate(args) -> int:
    settings = Settings()
    prepare_home(settings)
    from .world import World

    world = World(settings)
    world.ensure_eval_suite()
    if args.live:
        import signal
        import threading

        from .world.live import run_live

        stop = threading.Event()  # Ctrl-C lets the batch in progress land, then stops
        before = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            run_live(world, interval=args.interval, cycle=args.cycle, batches=args.batches, stop=stop, say=say,
                     drift_after=args.drift_after if args.scenario == "drift" else None)
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)
        return 0
    batch, stats = world.serve_cycle(args.cycle)
    say(f"landed {batch}: {stats}")
    return 0


def cmd_status(args) -> int:
    settings = Settings()
    prepare_home(settings)
    from .report import status_text

    say(status_text(settings))
    return 0


def override(action: str, reason: str, version: str | None = None) -> tuple[str | None, str]:
    """A person moves the champion past the gate: who, when and why go to MLflow tags and to Dagster."""
    import getpass
    from datetime import UTC, datetime

    from dagster import AssetMaterialization, DagsterInstance

    from .resources import build_resources

    if not reason.strip():
        raise ValueError(f"{action} needs --reason: an override without a reason is not auditable")
    settings = Settings()
    prepare_home(settings)
    registry = build_resources(settings)["registry"]
    audit = {"override_action": action, "override_by": getpass.getuser(),
             "override_at": datetime.now(UTC).isoformat(), "override_reason": reason}
    if action == "promote":
        before, after = registry.promote(version, {**audit, "promoted_by": audit["override_by"]}), str(version)
    else:
        before, after = registry.rollback(audit)
    DagsterInstance.get().report_runless_asset_event(AssetMaterialization(
        asset_key="champion", description=f"{action} by {audit['override_by']}: {reason}",
        metadata={"champion_version": after, "previous_champion": before or "none", **audit}))
    return before, after


def cmd_promote(args) -> int:
    before, after = override("promote", args.reason, args.version)
    say(f"champion v{before} -> v{after}, promoted by hand: {args.reason}")
    return 0


def cmd_rollback(args) -> int:
    before, after = override("rollback", args.reason)
    say(f"champion v{before} -> v{after}, rolled back: {args.reason}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from .feedback_cli import add_feedback_commands

    # before torch loads: its waiting OpenMP threads sleep instead of spinning, so shared cores stay usable
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = argparse.ArgumentParser(prog="rmi", description="Recursive model improvement on Dagster.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the loop against the simulated world")
    run.add_argument("--cycles", type=int, default=5, help="improvement cycles after the first model")
    run.add_argument("--fresh", action="store_true", help="start from an empty RMI_HOME")
    run.set_defaults(fn=cmd_run)
    ui = sub.add_parser("ui", help="the Dagster web UI on 127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)
    ui.set_defaults(fn=cmd_ui)
    sim = sub.add_parser("simulate", help="land one batch of simulated user feedback")
    sim.add_argument("--cycle", type=int, default=1, help="how far users have drifted toward hard questions")
    sim.add_argument("--live", action="store_true", help="keep landing batches from the current champion")
    sim.add_argument("--interval", type=float, default=60.0, help="seconds between live batches")
    sim.add_argument("--scenario", choices=["steady", "drift"], default="steady",
                     help="drift: after --drift-after batches, half the users ask a slice the champion barely knows")
    sim.add_argument("--drift-after", type=int, default=2, help="batches before the drift")
    sim.add_argument("--batches", type=int, default=None, help="stop after this many live batches")
    sim.set_defaults(fn=cmd_simulate)
    sub.add_parser("status", help="champion, challenger, warehouse").set_defaults(fn=cmd_status)
    add_feedback_commands(sub)
    promote = sub.add_parser("promote", help="make a model version the champion, past the gate (audited)")
    promote.add_argument("version", help="the MLflow model version")
    promote.add_argument("--reason", required=True, help="why: recorded with who and when")
    promote.set_defaults(fn=cmd_promote)
    rollback = sub.add_parser("rollback", help="move the champion back to the previous one (audited)")
    rollback.add_argument("--reason", required=True, help="why: recorded with who and when")
    rollback.set_defaults(fn=cmd_rollback)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except (LookupError, FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"rmi {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
