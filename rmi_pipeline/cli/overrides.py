"""`rmi promote`, `rmi rollback` and `rmi reject`: a person moves the champion past the gate, or turns down a version
that waits for their approval, audited in MLflow and Dagster."""

from __future__ import annotations

from typing import Annotated

import typer

from ..settings import Settings
from .home import prepare_home, say

Reason = Annotated[str, typer.Option(help="Why: recorded with who and when (MLflow tags, Dagster).")]


def _as_me() -> tuple[Settings, str]:
    """The settings, the home ready, and who is acting: the user at this terminal."""
    import getpass

    settings = Settings()
    prepare_home(settings)
    return settings, getpass.getuser()


def _override(action: str, reason: str, version: str | None = None) -> tuple[str | None, str]:
    from ..automation.overrides import override

    settings, me = _as_me()
    return override(settings, action, reason, by=me, via="rmi CLI", version=version)


def promote(version: Annotated[int, typer.Argument(help="The MLflow model version (not the champion's).")],
            reason: Reason) -> int:
    """Make a model version the champion, past the gate, or approve the one that waits (audited)."""
    before, after = _override("promote", reason, str(version))
    say(f"champion v{before} -> v{after}, promoted by hand: {reason}")
    return 0


def rollback(reason: Reason) -> int:
    """Move the champion back to the previous one (audited)."""
    before, after = _override("rollback", reason)
    say(f"champion v{before} -> v{after}, rolled back: {reason}")
    return 0


def reject(version: Annotated[int, typer.Argument(help="The model version that waits for approval.")],
           reason: Reason) -> int:
    """Turn down the version that waits for a person's approval (RMI_PROMOTION=approval; audited)."""
    from ..automation.overrides import reject as turn_down

    settings, me = _as_me()
    held, removed = turn_down(settings, str(version), reason, by=me, via="rmi CLI")
    say(f"v{version} rejected; champion stays v{held}" + (f"; no longer {' or '.join(removed)}" if removed else "")
        + f": {reason}")
    return 0
