"""`rmi`: run the whole loop against the simulated world, open the UI, or look at where things stand.

    rmi run [--cycles 5] [--fresh]   world -> feedback -> pipeline, N improvement cycles after a first model
    rmi ui [--port 3000]             the Dagster UI over RMI_HOME (sensors on)
    rmi serve [--host H] [--port P]  answers from the champion and feedback over HTTP (127.0.0.1:8000)
    rmi chat [--host H] [--port P]   the Slack app: /rmi status, promote, rollback, cycle, pause... (127.0.0.1:3100)
    rmi simulate --cycle N           one batch of user feedback from the current champion
    rmi simulate --live [--scenario drift|partner]   a batch every --interval seconds until Ctrl-C
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
from pathlib import Path

from ..settings import Settings
from .chat import add_chat_command
from .feedback import add_feedback_commands
from .home import prepare_home, say
from .overrides import cmd_promote, cmd_rollback
from .run import cmd_run
from .serve import add_serve_command


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
    from contextlib import nullcontext

    from ..resources import build_resources
    from ..resources.registry import CHAMPION
    from ..serving.process import running_gateway, wait_ready
    from ..world import World
    from .run import client_key

    if not args.gateway and build_resources(settings)["registry"].version(CHAMPION) is None:
        raise RuntimeError("no champion is serving yet: run a first improvement cycle (`rmi run --cycles 0`)")
    # users need a gateway: the one at --gateway, or one started for as long as they ask
    with nullcontext((args.gateway, None)) if args.gateway else running_gateway(
            log_file=settings.resolved_home / "serve.log") as (url, _):
        world = World(settings, url, client_key(settings))
        world.ensure_eval_suite()
        wait_ready(url, None)
        if args.live:
            import signal
            import threading

            from ..world.live import run_live

            stop = threading.Event()  # Ctrl-C lets the batch in progress land, then stops
            before = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                run_live(world, interval=args.interval, cycle=args.cycle, batches=args.batches, stop=stop, say=say,
                         scenario=args.scenario, scenario_after=args.scenario_after)
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)
            return 0
        batches, stats = world.serve_cycle(args.cycle)
        say(f"the gateway wrote {', '.join(batches) or 'no batch'}: {stats}")
    return 0


def cmd_status(args) -> int:
    settings = Settings()
    prepare_home(settings)
    from .report import status_text

    say(status_text(settings))
    return 0


def main(argv: list[str] | None = None) -> int:
    # before torch loads: its waiting OpenMP threads sleep instead of spinning, so shared cores stay usable
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from importlib.metadata import version

    parser = argparse.ArgumentParser(prog="rmi", description="Recursive model improvement on Dagster.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('rmi-pipeline')}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the loop against the simulated world")
    run.add_argument("--cycles", type=int, default=5, help="improvement cycles after the first model")
    run.add_argument("--fresh", action="store_true", help="start from an empty RMI_HOME")
    run.set_defaults(fn=cmd_run)
    ui = sub.add_parser("ui", help="the Dagster web UI on 127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)
    ui.set_defaults(fn=cmd_ui)
    add_serve_command(sub)
    add_chat_command(sub)
    sim = sub.add_parser("simulate", help="land one batch of simulated user feedback")
    sim.add_argument("--cycle", type=int, default=1, help="how far users have drifted toward hard questions")
    sim.add_argument("--live", action="store_true", help="keep landing batches from the current champion")
    sim.add_argument("--interval", type=float, default=60.0, help="seconds between live batches")
    sim.add_argument("--scenario", choices=["steady", "drift", "partner"], default="steady",
                     help="drift: half the users move to a slice the champion barely knows; partner: a fifth of "
                          "the questions come from an app whose client sends wrong corrections (it fools the "
                          "offline gate; the canary catches it)")
    sim.add_argument("--scenario-after", "--drift-after", type=int, default=2,
                     help="batches before the scenario starts (default: 2)")
    sim.add_argument("--batches", type=int, default=None, help="stop after this many live batches")
    sim.add_argument("--gateway", default=None, help="URL of a running `rmi serve` (default: start one)")
    sim.set_defaults(fn=cmd_simulate)
    sub.add_parser("status", help="champion, challenger, warehouse").set_defaults(fn=cmd_status)
    add_feedback_commands(sub)
    promote = sub.add_parser("promote", help="make a model version the champion, past the gate (audited)")
    promote.add_argument("version", type=int, help="the MLflow model version (a number; not the champion's)")
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
    except (ConnectionError, TimeoutError) as exc:  # a store or the warehouse out of reach: nothing was changed
        print(f"rmi {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
