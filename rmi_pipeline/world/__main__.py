"""The simulated world as a program of its own, so that no command of the pipeline imports it: `rmi run` and
`rmi simulate` start it and read what it prints (rmi_pipeline/cli/simulation.py), as the pipeline reads what
users leave only in the gateway's feedback files.

    python -m rmi_pipeline.world rounds --gateway URL   one JSON line per round asked on stdin ({"cycle": N})
    python -m rmi_pipeline.world live --gateway URL [--cycle N] [--interval S] [--batches N] [--scenario drift]
    python -m rmi_pipeline.world prepare --task catalogue --folder DIR   what a team brings, and its settings

With --task catalogue users ask about a shop's catalogue (world/catalogue), a task the pipeline cannot check: rounds
then also runs the world's judge on --judge-port, and --drift-at N changes prices before round N. Both rounds and live
first make sure the curators' eval suite is sealed (a team's eval file needs none). Rounds end when stdin closes; live
ends on Ctrl-C, and with --exit-with-parent when stdin closes too: the process that started it is gone (killed, even),
and so are the users.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from ..settings import Settings
from .world import World


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmi_pipeline.world", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["rounds", "live", "prepare"], help="rounds: one round per line on stdin, "
                        "its JSON on stdout; live: a batch every --interval seconds until Ctrl-C; prepare: write "
                        "what a team brings for --task and print its settings as JSON.")
    parser.add_argument("--gateway", help="URL of a running `rmi serve` (rounds, live).")
    parser.add_argument("--task", choices=["recipe", "catalogue"], default="recipe", help="What users ask: the "
                        "recipe's own problems, or a shop's catalogue (no verifier; a judge grades).")
    parser.add_argument("--folder", help="catalogue: the world's folder (the team's model, eval file, catalogue).")
    parser.add_argument("--judge-port", type=int, help="catalogue rounds: the port the world's judge answers on.")
    parser.add_argument("--judge-error-rate", type=float, default=0.1, help="catalogue: how often the judge's "
                        "verdict is wrong (default 0.1).")
    parser.add_argument("--judge-length-bias", type=float, default=0.2, help="catalogue: extra chance the judge "
                        "passes a long wrong answer (default 0.2).")
    parser.add_argument("--drift-at", type=int, help="catalogue rounds: prices change before this round.")
    parser.add_argument("--cycle", type=int, default=1, help="live: how far users have drifted toward hard "
                        "questions (default 1).")
    parser.add_argument("--interval", type=float, default=60.0, help="live: seconds between batches (default 60).")
    parser.add_argument("--batches", type=int, help="live: stop after this many batches.")
    parser.add_argument("--scenario", choices=["steady", "drift", "partner"], default="steady",
                        help="live: what changes after --scenario-after batches (docs/tutorial/first-run.md: "
                             "Watching the loop run by itself).")
    parser.add_argument("--scenario-after", type=int, default=2, help="live: batches before the scenario starts.")
    parser.add_argument("--exit-with-parent", action="store_true",
                        help="live: stop when stdin closes (how `rmi simulate` starts it).")
    args = parser.parse_args(argv)
    settings = Settings()
    if args.task == "catalogue" and not args.folder:
        parser.error("--task catalogue needs --folder")
    if args.mode == "prepare":
        from .catalogue.task import prepare

        _reply({"env": prepare(Path(args.folder), settings.seed)} if args.task == "catalogue" else {"env": {}})
        return 0
    if not args.gateway:
        parser.error(f"{args.mode} needs --gateway")
    task = None
    if args.task == "catalogue":
        from .catalogue.task import CatalogueTask

        task = CatalogueTask(Path(args.folder), settings.simulation.asserting_share)
    keys = settings.serving.api_keys  # the world is a client like any other: with keys set, it uses the first
    world = World(settings, args.gateway, keys[0] if keys else None, task)
    curated = world.ensure_eval_suite()
    if args.mode == "rounds":
        with _judge(args):
            _reply({"curated": curated})
            for line in sys.stdin:
                cycle = int(json.loads(line)["cycle"])
                changed = task.change(random.Random(f"drift-{settings.seed}")) if cycle == args.drift_at else None
                batches, stats = world.serve_cycle(cycle)
                if changed:
                    stats["drift"] = {"topic": changed.topic, "changed": changed.changed}
                _reply({"batches": batches, "stats": stats})
        return 0
    from .live import run_live

    stop = threading.Event()  # Ctrl-C (forwarded by `rmi simulate`) lets the batch in progress land, then stops
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.exit_with_parent:  # the command that started it holds stdin's other end, until it ends or is killed
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), name="parent-gone", daemon=True).start()
    if curated:
        _say("curators wrote the private eval suite")
    run_live(world, interval=args.interval, cycle=args.cycle, batches=args.batches, stop=stop, say=_say,
             scenario=args.scenario, scenario_after=args.scenario_after)
    return 0


@contextmanager
def _judge(args):
    """The world's judge for the catalogue task, on the port the pipeline was told (RMI_JUDGE_URL), for as long as
    the rounds last; no judge for the recipe's own problems."""
    if args.task != "catalogue" or args.judge_port is None:
        yield None
        return
    from .catalogue.task import MATCHER, STATE, STATE_VARIABLE
    from .judge import running_judge

    with running_judge(MATCHER, env={STATE_VARIABLE: str(Path(args.folder) / STATE)}, port=args.judge_port,
                       error_rate=args.judge_error_rate, length_bias=args.judge_length_bias,
                       seed=Settings().seed) as url:
        yield url


def _reply(message: dict) -> None:
    _say(json.dumps(message))


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
