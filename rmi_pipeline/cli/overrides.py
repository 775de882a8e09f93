"""`rmi promote` and `rmi rollback`: a person moves the champion past the gate, audited in MLflow and Dagster."""

from __future__ import annotations

from ..settings import Settings
from .home import prepare_home, say


def override(action: str, reason: str, version: str | None = None) -> tuple[str | None, str]:
    """Who, when and why go to MLflow tags and to Dagster; returns (the champion before, the champion now)."""
    import getpass
    from datetime import UTC, datetime

    from dagster import AssetMaterialization, DagsterInstance

    from ..assets.promotion import champion
    from ..resources import build_resources

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
        asset_key=champion.key, description=f"{action} by {audit['override_by']}: {reason}",
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
