"""`rmi`: run the whole loop against the simulated world, open the UI, or look at where things stand.

    rmi run [--cycles 5] [--fresh]   world -> feedback -> pipeline, N improvement cycles after a first model
    rmi ui [--port 3000]             the Dagster UI over RMI_HOME (sensors on)
    rmi serve [--host H] [--port P]  answers from the champion and feedback over HTTP (127.0.0.1:8000)
    rmi chat [--host H] [--port P]   the Slack app: /rmi status, promote, rollback, cycle, pause... (127.0.0.1:3100)
    rmi simulate --cycle N           one batch of user feedback from the current champion
    rmi simulate --live [--scenario drift|partner]   a batch every --interval seconds until Ctrl-C
    rmi status                       champion, challenger, canary, warehouse, pending batches and recent runs
    rmi feedback ingest PATH         validate a local batch file and land it in the warehouse now
    rmi feedback import TOOL FILE... feedback from Langfuse, Phoenix or OpenTelemetry, converted and landed
    rmi feedback stats               thumbs-down rates, corrections and failing prompts
    rmi feedback forget --user ID    delete a user's feedback from every store (audited); --pending completes requests
    rmi generation --size NAME       a new generation from scratch, taught by the champion, gated like any challenger
    rmi derivative [--size NAME]     a smaller student distilled from the champion: the alias `fast` if it keeps up
    rmi promote VERSION --reason T   a person overrides the gate (audited)
    rmi rollback --reason T          back to the previous champion (audited)
    rmi reject VERSION --reason T    turn down the version that waits for approval (RMI_PROMOTION=approval; audited)
    rmi check-recipe PATH            check a recipe (package.module:ClassName) against the recipe contract

Every help page shows the defaults; settings come from RMI_* environment variables (docs/reference/settings.md).
"""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer

from ..settings import Settings
from . import feedback
from .chat import chat
from .check import check_recipe
from .extras import require
from .generations import derivative, generation
from .home import prepare_home, reach_stores, say
from .overrides import promote, reject, rollback
from .run import run
from .serve import serve
from .ui import ui

SETTINGS = ("Settings: RMI_* environment variables (every one: docs/reference/settings.md); RMI_HOME holds the "
            "loop's state (default ./.rmi).")

app = typer.Typer(name="rmi", help="Recursive model improvement on Dagster: feedback -> data -> training -> honest "
                  "evals -> promotion, turning by itself.", epilog=SETTINGS, no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120})
feedback_app = typer.Typer(help="Land a feedback file (or import one from Langfuse, Phoenix or OpenTelemetry), see "
                           "what users say, or delete a user's feedback.",
                           no_args_is_help=True,
                           epilog=SETTINGS, rich_markup_mode=None)
app.add_typer(feedback_app, name="feedback")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        say(f"rmi {version('rmi-pipeline')}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    pass


class Scenario(StrEnum):
    steady = "steady"
    drift = "drift"
    partner = "partner"


def simulate(
    cycle: Annotated[int, typer.Option(help="How far users have drifted toward hard questions.")] = 1,
    live: Annotated[bool, typer.Option("--live", help="Keep landing batches from the current champion.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between live batches.")] = 60.0,
    scenario: Annotated[Scenario, typer.Option(help="drift: half the users move to a slice the champion barely "
                                               "knows; partner: a fifth of the questions come from an app whose "
                                               "client sends wrong corrections (it fools the offline gate; the "
                                               "canary catches it).")] = Scenario.steady,
    scenario_after: Annotated[int, typer.Option("--scenario-after", "--drift-after",
                                                help="Live batches before the scenario starts.")] = 2,
    batches: Annotated[int | None, typer.Option(help="Stop after this many live batches.")] = None,
    gateway: Annotated[str | None, typer.Option(help="URL of a running `rmi serve` (default: start one).")] = None,
) -> int:
    """Simulated users ask the champion through the gateway; their feedback lands as batch files."""
    require("serve", "rmi simulate")
    settings = Settings()
    prepare_home(settings)
    from contextlib import nullcontext

    from ..resources import build_resources
    from ..resources.registry import CHAMPION
    from ..serving.process import running_gateway, wait_ready
    from .simulation import live as live_users
    from .simulation import rounds

    resources = build_resources(settings)
    reach_stores(resources)
    if not gateway and resources["registry"].version(CHAMPION) is None:
        raise RuntimeError("no champion is serving yet: run a first improvement cycle (`rmi run --cycles 0`)")
    # users need a gateway: the one at --gateway, or one started for as long as they ask
    with nullcontext((gateway, None)) if gateway else running_gateway(
            log_file=settings.resolved_home / "serve.log") as (url, _):
        wait_ready(url, None)
        if live:
            code = live_users(url, ["--cycle", str(cycle), "--interval", str(interval), "--scenario", scenario.value,
                                    "--scenario-after", str(scenario_after),
                                    *(["--batches", str(batches)] if batches is not None else [])])
            if code:
                raise RuntimeError(f"the simulated world stopped with exit code {code} (its error is above)")
            return 0
        with rounds(url, settings.resolved_home / "world.log") as users:
            if users.curated:
                say("curators wrote the private eval suite")
            names, stats = users.round(cycle)
        say(f"the gateway wrote {', '.join(names) or 'no batch'}: {stats['queries']} questions, right "
            f"{stats['served_accuracy']:.0%}")
    return 0


def status() -> int:
    """Champion, challenger and canary, every model's live quality, pending batches and alerts, the latest runs."""
    settings = Settings()
    prepare_home(settings)
    from .report import status_text

    say(status_text(settings))
    return 0


COMMANDS = (run, ui, serve, chat, simulate, status, generation, derivative, promote, rollback, reject, check_recipe)
FEEDBACK = (feedback.ingest, feedback.stats, feedback.forget)
for command in COMMANDS:
    app.command(epilog=SETTINGS)(command)
for command in FEEDBACK:
    feedback_app.command(epilog=SETTINGS)(command)
feedback_app.command(name="import", epilog=SETTINGS)(feedback.import_feedback)  # `import` is a Python keyword


def main(argv: list[str] | None = None) -> int:
    """The console script: an exit code, and a one-line error instead of a traceback for what a user can fix."""
    args = sys.argv[1:] if argv is None else argv
    known = {c.__name__.replace("_", "-") for c in COMMANDS + FEEDBACK} | {"feedback", "import"}
    name = " ".join(["rmi", *(a for a in args[:2] if a in known)])  # "rmi feedback ingest": what said the error
    try:
        return app(args=args, prog_name="rmi", standalone_mode=False) or 0
    except typer.Abort:
        print("Aborted.", file=sys.stderr)
        return 1
    except typer.TyperException as exc:  # a usage error: says what is wrong and where the help is
        exc.show()
        return exc.exit_code
    except (LookupError, FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except (ConnectionError, TimeoutError) as exc:  # a store or the warehouse out of reach: nothing was changed
        print(f"{name}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
