"""`rmi promote` and `rmi rollback`: a person moves the champion past the gate, audited in MLflow and Dagster."""

from __future__ import annotations

from ..settings import Settings
from .home import prepare_home, say


def _override(action: str, reason: str, version: str | None = None) -> tuple[str | None, str]:
    import getpass

    from ..automation.overrides import override

    settings = Settings()
    prepare_home(settings)
    return override(settings, action, reason, by=getpass.getuser(), via="rmi CLI", version=version)


def cmd_promote(args) -> int:
    before, after = _override("promote", args.reason, args.version)
    say(f"champion v{before} -> v{after}, promoted by hand: {args.reason}")
    return 0


def cmd_rollback(args) -> int:
    before, after = _override("rollback", args.reason)
    say(f"champion v{before} -> v{after}, rolled back: {args.reason}")
    return 0
