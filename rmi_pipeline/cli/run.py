"""`rmi run`: the whole loop against the simulated world, cycle after cycle, with a table and a learning curve.

The world's users reach the champion the way real ones would: through `rmi serve`, started here as a process of
its own (stopped by its pid at the end); their feedback lands as the gateway's batch files. The world is a program
of its own too (cli/simulation.py): this command never imports it.
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from ..settings import Settings
from .extras import require
from .home import prepare_home, reach_stores, say


def run(cycles: Annotated[int, typer.Option(min=0, help="Improvement cycles after the first model.")] = 5,
        fresh: Annotated[bool, typer.Option("--fresh", help="Start from an empty RMI_HOME (what the loop and the "
                                                            "simulated world wrote there; a file of yours "
                                                            "stays).")] = False,
        task: Annotated[str, typer.Option(help="What the world's users ask: 'recipe' (the recipe's own problems, "
                                               "which it generates and checks) or 'catalogue' (a shop's catalogue: "
                                               "the team's own model and eval file, a judge model over HTTP, no "
                                               "verifier; docs/how-to/your-task-and-eval.md).")] = "recipe",
        drift_at: Annotated[int | None, typer.Option(help="catalogue: prices change before this cycle's users "
                                                          "ask.")] = None) -> int:
    """The whole loop against the simulated world: users ask `rmi serve`, their feedback lands, each cycle trains,
    judges and promotes through Dagster, MLflow and DuckDB; then a table and a learning curve. Settings: RMI_HOME,
    RMI_SIM_QUERIES_PER_CYCLE, RMI_SIM_RATING_SHARE, RMI_TRAIN_STEPS, RMI_MIX, RMI_PROMOTION
    (docs/reference/settings.md)."""
    require("serve", "rmi run")  # the world's users ask through the gateway
    # the world asks RMI_SIM_QUERIES_PER_CYCLE questions a cycle: a canary trial takes half of one cycle's users
    # and ends with the ratings they give (RMI_SIM_RATING_SHARE of its answers), before the next cycle trains
    # (a 10% share would need 4 cycles of users)
    os.environ.setdefault("RMI_CANARY_SHARE", "0.5")
    settings = Settings()
    sim = settings.simulation
    os.environ.setdefault("RMI_CANARY_MIN_EVENTS", str(max(1, int(0.9 * settings.canary.share * sim.queries_per_cycle
                                                                  * sim.rating_share))))
    settings = Settings()
    home = prepare_home(settings, fresh=fresh)
    world_options = []
    if task == "catalogue":
        world_options = the_teams_task(home / "world", drift_at)
        settings = Settings()
    elif task != "recipe" or drift_at is not None:
        raise typer.BadParameter("--task is 'recipe' or 'catalogue'; --drift-at goes with --task catalogue")
    say(f"rmi run: a first model, then {cycles} improvement cycle(s); state in {home}")
    say(users_line(settings))
    from dagster import DagsterInstance

    from ..automation.dead_runs import fail_dead_runs
    from ..definitions import build_definitions
    from ..serving.process import running_gateway
    from ..training.worker import stop_training_workers
    from .report import learning_curve, summary_table, write_summary
    from .simulation import rounds

    defs = build_definitions(settings)
    reach_stores(defs.resources)
    instance = DagsterInstance.get()
    for run_id in fail_dead_runs(instance, defs.resources["registry"]):  # left by an earlier, killed `rmi run`
        say(f"run {run_id} was left unfinished by a process that is gone: marked failed")
    started = time.perf_counter()
    # the gateway looks for a new champion every second here, so each cycle's users meet the latest one
    env = {"RMI_SERVE_RELOAD_SECONDS": os.environ.get("RMI_SERVE_RELOAD_SECONDS", "1")}
    try:
        with running_gateway(env, log_file=home / "serve.log") as (url, _):
            say(f"rmi serve answers the world's users on {url} (its log: {home / 'serve.log'})")
            with rounds(url, home / "world.log", world_options) as users:
                if users.curated:
                    say("curators wrote the private eval suite")
                records = _cycles(cycles, defs, instance, users)
                closing = (_closing_round(cycles + 1, defs, instance, users, records)
                           if records and not records[-1].interrupted else None)
    finally:
        stop_training_workers(home)  # a one-shot command leaves no process behind
    say("")
    say(users_line(settings, records))
    say(summary_table(records))
    if closing:
        say(closing)
    png = learning_curve(records, home / "learning_curve.png")
    write_summary(records, home / "run_summary.json")
    say(f"\nlearning curve: {png}\nsummary: {home / 'run_summary.json'}\n"
        f"total {time.perf_counter() - started:.0f} s; `make ui` shows every run and the lineage")
    return 0 if all(r.success for r in records) else 1


def the_teams_task(folder, drift_at: int | None) -> list[str]:
    """The catalogue task: the world writes what a team would bring (its model, its curators' eval file) and the
    settings that point the loop at them, which are set here unless set already; its judge will answer on a free
    port (RMI_JUDGE_URL). Returns the world's options for its rounds."""
    from ..serving.process import free_port
    from .simulation import prepare

    with_judge = "RMI_JUDGE_URL" not in os.environ
    say("the world writes the team's model and its eval file (once per home)")
    for name, value in prepare("catalogue", folder).items():
        os.environ.setdefault(name, value)
    options = ["--task", "catalogue", "--folder", str(folder)]
    if with_judge:
        port = free_port()
        os.environ["RMI_JUDGE_URL"] = f"http://127.0.0.1:{port}/v1"
        options += ["--judge-port", str(port)]
    return options + (["--drift-at", str(drift_at)] if drift_at is not None else [])


def _cycles(cycles: int, defs, instance, users) -> list:
    from ..automation.in_process import QUIET_LOGS, ingest_new_batches, keep_what_is_loaded, launched_here
    from ..automation.jobs import improvement_cycle
    from ..resources.registry import CANARY, CHAMPION
    from ..serving.process import wait_ready
    from .progress import narrated, new_run_id
    from .report import CycleRecord

    registry = defs.resources["registry"]
    records: list[CycleRecord] = []
    for cycle in range(cycles + 1):
        record = CycleRecord(cycle=cycle)
        if cycle > 0:
            t = time.perf_counter()
            canary = registry.version(CANARY)
            wait_ready(users.gateway_url, registry.version(CHAMPION).version,
                       canary=canary.version if canary else None)
            with narrated(f"[cycle {cycle}]", "users asking through the gateway", say):
                batches, record.world = users.round(cycle)
            record.seconds["world"] = time.perf_counter() - t
            say(f"[cycle {cycle}] users asked {record.world['queries']} questions ({_who(record.world)}) through "
                f"the gateway (right {record.world['served_accuracy']:.0%}); their feedback is in its batch files"
                + (f" (the last: {batches[-1]})" if batches else ""))
            for line in world_lines(cycle, record.world):
                say(line)
            t = time.perf_counter()
            with narrated(f"[cycle {cycle}]", "ingesting their feedback", say):
                record.ingest = ingest_new_batches(defs, instance)
            record.seconds["ingest"] = time.perf_counter() - t
            say(f"[cycle {cycle}] {ingested(record.ingest)}")
            if registry.version(CANARY) is not None:
                with narrated(f"[cycle {cycle}]", "canary verdict", say):
                    verdict = _canary_verdict(defs, instance, cycle, records)
                say(f"[cycle {cycle}] canary: {verdict}")
        say(f"[cycle {cycle}] improvement cycle: dataset -> training -> evaluation -> gate")
        before = registry.version(CHAMPION)
        run_id = new_run_id()
        with narrated(f"[cycle {cycle}]", "improvement cycle", say, instance, run_id):
            result = defs.resolve_job_def(improvement_cycle.name).execute_in_process(
                instance=instance, raise_on_error=False, run_config=QUIET_LOGS, run_id=run_id,
                tags={"rmi/cycle": str(cycle), "rmi/trigger": "rmi-run", **launched_here()})
        record.read_cycle_run(result, instance)
        canary = registry.version(CANARY)
        if record.verdict == "promote" and canary and str(canary.version) == str(record.challenger_version):
            record.verdict = "canary"  # passed the gate; the next cycle's users decide
        say(record.progress_line())
        for line in (record.judge_line(), record.reward_line()):
            if line:
                say(line)
        if record.success and registry.version(CHAMPION) is not None:
            with narrated(f"[cycle {cycle}]", "health check", say):
                health = _health(defs, instance, cycle)
            say(f"[cycle {cycle}] health: {health}")
        if not record.success:
            after = registry.version(CHAMPION)
            moved = (after and after.version) != (before and before.version)
            what = f"the champion had moved to v{after.version} before it did" if moved else "the champion did not move"
            say(f"[cycle {cycle}] the cycle run failed; {what}. See `make ui`, run {result.run_id}.")
        records.append(record)
        if cycle == 0:
            keep_what_is_loaded()
        if record.interrupted:  # Dagster turns Ctrl-C (or SIGTERM) into a failed run: the loop stops there too
            say(f"[cycle {cycle}] interrupted: no more cycles")
            break
        if cycle == 0 and registry.version(CHAMPION) is None:
            if not record.success:
                break  # said above: the run failed, not the first model
            say("[cycle 0] no first model reached the floor, so nothing can serve users yet; try more "
                "RMI_TRAIN_BOOTSTRAP_STEPS or a lower RMI_GATE_FIRST_FLOOR")
            break
    return records


def _canary_verdict(defs, instance, cycle: int, records: list) -> str:
    """canary_sensor's run, here right after an ingest: the verdict's sentence; the record of the cycle that made
    the canary learns how its trial ended."""
    from ..assets import canary_verdict
    from ..automation.in_process import QUIET_LOGS, launched_here
    from ..automation.jobs import canary_trial

    trial = defs.resolve_job_def(canary_trial.name).execute_in_process(
        instance=instance, raise_on_error=False, run_config=QUIET_LOGS,
        tags={"rmi/cycle": str(cycle), "rmi/trigger": "rmi-run", **launched_here()})
    said = [e.materialization.metadata for e in trial.get_asset_materialization_events()
            if e.asset_key == canary_verdict.key]
    if not said:
        return f"the verdict failed; see `make ui`, run {trial.run_id}"
    action, version = said[0]["verdict"].value, said[0]["canary_version"].value
    for record in records:
        if record.verdict == "canary" and str(record.challenger_version) == version and action != "wait":
            record.canary_ended(action)
    return said[0]["reason"].value


def _health(defs, instance, cycle: int) -> str:
    """health_check's run, as health_after_cycle starts it under the daemon: its check's sentence."""
    from ..automation.in_process import QUIET_LOGS, launched_here
    from ..automation.jobs import health_check

    checked = defs.resolve_job_def(health_check.name).execute_in_process(
        instance=instance, raise_on_error=False, run_config=QUIET_LOGS,
        tags={"rmi/cycle": str(cycle), "rmi/trigger": "rmi-run", **launched_here()})
    checks = checked.get_asset_check_evaluations()
    return checks[0].description if checks else f"the check failed; see `make ui`, run {checked.run_id}"


def _closing_round(cycle: int, defs, instance, users, records: list) -> str | None:
    """The last cycle's canary meets the users of one more round, so that the run ends with its verdict."""
    from ..automation.in_process import ingest_new_batches
    from ..resources.registry import CANARY, CHAMPION
    from ..serving.process import wait_ready
    from .progress import narrated

    registry = defs.resources["registry"]
    canary = registry.version(CANARY)
    if canary is None:
        return None
    wait_ready(users.gateway_url, registry.version(CHAMPION).version, canary=canary.version)
    with narrated("[closing]", "users asking through the gateway", say):
        _, stats = users.round(cycle)
    say(f"[closing] users asked {stats['queries']} questions ({_who(stats)}) through the gateway")
    with narrated("[closing]", "ingesting their feedback and the canary verdict", say):
        records[-1].closing = {"world": stats, "ingest": ingest_new_batches(defs, instance)}
        verdict = _canary_verdict(defs, instance, cycle, records)
    return f"canary v{canary.version} after the closing round of users: {verdict}"


def users_line(settings: Settings, records: list | None = None) -> str:
    """The world the figures come from: the shares of answers users rate and of thumbs-down they correct (settings),
    then what they did over the run (with `records`): a table means little without who rated it."""
    sim = settings.simulation
    line = (f"the world's users rate {sim.rating_share:.0%} of answers (RMI_SIM_RATING_SHARE) and correct "
            f"{sim.correction_share:.0%} of their thumbs-down on wrong ones (RMI_SIM_CORRECTION_SHARE)"
            + (f"; unrated, they copy {sim.copy_share:.0%} of the answers they take for right and ask again after "
               f"{sim.ask_again_share:.0%} of those they take for wrong" if sim.rating_share < 1 else "")
            + f"; {sim.wrong_user_share:.0%} of them judge wrongly")
    worlds = [r.world for r in records or [] if r.world] + [r.closing["world"] for r in records or [] if r.closing]
    if not worlds:
        return line
    total = lambda key: sum(w.get(key, 0) for w in worlds)  # noqa: E731
    implicit = sum(sum(w.get("implicit", {}).values()) for w in worlds)
    return (f"{line}; over the run: {total('queries'):,} questions, {total('rated'):,} rated, {total('down'):,} "
            f"thumbs-down, {total('corrections'):,} corrections, {implicit:,} implicit signals")


def world_lines(cycle: int, stats: dict) -> list[str]:
    """What changed under the model this round, and users' thumbs-down per slice where there are few slices (a
    task's topics): the live signal a drift shows in first."""
    lines = []
    if "drift" in stats:
        changed = ", ".join(f"{name} {old} -> {new}" for name, (old, new) in stats["drift"]["changed"].items())
        lines.append(f"[cycle {cycle}] the world changed under the model ({stats['drift']['topic']}): {changed}")
    slices = stats.get("by_slice", {})
    if 0 < len(slices) <= 8:
        lines.append(f"[cycle {cycle}] users' thumbs-down per slice: " + ", ".join(
            f"{name} {s['down'] / s['rated']:.0%} of {s['rated']:,} rated" for name, s in slices.items() if s["rated"]))
    return lines


def _who(stats: dict) -> str:
    """Which versions answered a round: "of champion v3" or "3,012 of v3, 2,988 of v4"."""
    versions = stats["versions"]
    if len(versions) == 1:
        return f"of champion v{next(iter(versions))}"
    return ", ".join(f"{n:,} of v{v}" for v, n in sorted(versions.items(), key=lambda kv: int(kv[0])))


def ingested(counts: dict) -> str:
    """An ingest's counts as a sentence (in = new + duplicates + quarantined)."""
    failed = f"; {counts['failed']} failed (ingested again later)" if counts.get("failed") else ""
    return (f"ingested {counts['batches']} batch(es): {counts['rows_in']:,} rows in, {counts['ingested']:,} new "
            f"events, {counts['duplicates']:,} duplicates, {counts['quarantined']:,} quarantined{failed}")
