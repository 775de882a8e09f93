"""`rmi run`: the whole loop against the simulated world, cycle after cycle, with a table and a learning curve."""

from __future__ import annotations

import time

from ..settings import Settings
from .home import prepare_home, say


def cmd_run(args) -> int:
    settings = Settings()
    home = prepare_home(settings, fresh=args.fresh)
    say(f"rmi run: {args.cycles} improvement cycles after a first model; state in {home}")
    from dagster import DagsterInstance

    from ..automation.dead_runs import fail_dead_runs, process_tags
    from ..automation.in_process import QUIET_LOGS, ingest_new_batches
    from ..automation.jobs import improvement_cycle
    from ..definitions import build_definitions
    from ..resources.registry import CHAMPION
    from ..world import World
    from .report import CycleRecord, learning_curve, summary_table, write_summary

    defs = build_definitions(settings)
    instance = DagsterInstance.get()
    for run_id in fail_dead_runs(instance, defs.resources["registry"]):  # left by an earlier, killed `rmi run`
        say(f"run {run_id} was left unfinished by a process that is gone: marked failed")
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
        before = world.registry.version(CHAMPION)
        result = defs.resolve_job_def(improvement_cycle.name).execute_in_process(
            instance=instance, raise_on_error=False, run_config=QUIET_LOGS,
            tags={"rmi/cycle": str(cycle), "rmi/trigger": "rmi-run", **process_tags()})
        record.read_cycle_run(result, instance)
        say(record.progress_line())
        if not result.success:
            after = world.registry.version(CHAMPION)
            moved = (after and after.version) != (before and before.version)
            what = f"the champion had moved to v{after.version} before it did" if moved else "the champion did not move"
            say(f"[cycle {cycle}] the cycle run failed; {what}. See `make ui`, run {result.run_id}.")
        records.append(record)
        if cycle == 0 and world.registry.version(CHAMPION) is None:
            if not result.success:
                break  # said above: the run failed, not the first model
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
