"""The simulated world as a program of its own, so that no command of the pipeline imports it: `rmi run` and
`rmi simulate` start it and read what it prints (rmi_pipeline/cli/simulation.py), as the pipeline reads what
users leave only in the gateway's feedback files.

    python -m rmi_pipeline.world rounds --gateway URL   one JSON line per round asked on stdin ({"cycle": N})
    python -m rmi_pipeline.world live --gateway URL [--cycle N] [--interval S] [--batches N] [--scenario drift]

Both first make sure the curators' eval suite is sealed. Rounds end when stdin closes; live ends on Ctrl-C, and with
--exit-with-parent when stdin closes too: the process that started it is gone (killed, even), and so are the users.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from ..settings import Settings
from .world import World


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rmi_pipeline.world", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["rounds", "live"], help="rounds: one round per line on stdin, its JSON on "
                        "stdout; live: a batch every --interval seconds until Ctrl-C.")
    parser.add_argument("--gateway", required=True, help="URL of a running `rmi serve`.")
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
    keys = settings.serving.api_keys  # the world is a client like any other: with keys set, it uses the first
    world = World(settings, args.gateway, keys[0] if keys else None)
    curated = world.ensure_eval_suite()
    if args.mode == "rounds":
        _reply({"curated": curated})
        for line in sys.stdin:
            batches, stats = world.serve_cycle(int(json.loads(line)["cycle"]))
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


def _reply(message: dict) -> None:
    _say(json.dumps(message))


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
