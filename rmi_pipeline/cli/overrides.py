"""`rmi promote` and `rmi rollback`: a person moves the champion past the gate, audited in MLflow and Dagster."""

from __future__ import annotations

from typing import Annotated

import typer

from ..settings import Settings
from .home import prepare_home, say

Reason = Annotated[str, typer.Option(help="Why: recorded with who and when (MLflow tags, Dagster).")]


def _override(action: str, reason: str, version: str | None = None) -> tuple[str | None, str]:
    import getpass

    from ..automation.overrides import override

    settings = Settings()
    prepare_home(settings)
    return override(settings, action, reason, by=getpass.getuser(), via="rmi CLI", version=version)


def promote(version: Annotated[int, typer.Argument(help="The MLflow model version (not the champion's).")],
            reason: Reason) -> int:
    """Make a model version the champion, past the gate (audited)."""
    before, after = _override("promote", reason, str(version))
    say(f"champion v{before} -> v{after}, promoted by hand: {reason}")
    return 0


def rollback(reason: Reason) -> int:
    """Move the champion back to the previous one (audited)."""
    before, after = _override("rollback", reason)
    say(f"champion v{before} -> v{after}, rolled back: {reason}")
    return 0
