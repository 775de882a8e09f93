"""A person moves the champion past the gate (`rmi promote`, `rmi rollback`, `/rmi` in Slack), audited in MLflow
and Dagster: who, when, why and from where."""

from __future__ import annotations

from datetime import UTC, datetime


def override(settings, action: str, reason: str, by: str, via: str,
             version: str | None = None) -> tuple[str | None, str]:
    """Who, when and why go to MLflow tags and to Dagster; returns (the champion before, the champion now).
    Refused with a ValueError, before anything moves: no reason, a version that is not a number or is already
    the champion; a LookupError: a version that does not exist, nothing to roll back to."""
    from dagster import DagsterInstance

    from ..assets.probes import SUSPECTED
    from ..assets.promotion import champion_moved
    from ..resources import build_resources
    from ..resources.registry import CHAMPION

    if not reason.strip():
        raise ValueError(f"{action} needs a reason: an override without one is not auditable")
    registry = build_resources(settings)["registry"]
    current = registry.version(CHAMPION)
    if action == "promote":
        if not str(version).isdigit():
            raise ValueError(f"a model version is a number, not {version!r}")
        if current is not None and str(current.version) == str(version):
            raise ValueError(f"v{version} is already the champion")
    audit = {"override_action": action, "override_by": by, "override_via": via,
             "override_at": datetime.now(UTC).isoformat(), "override_reason": reason}
    if action == "promote":
        cleared = {f"{SUSPECTED}_cleared": f"by {by} ({via}): {reason}"} if SUSPECTED in registry.tags_of(
            version) else {}
        before, after = registry.promote(version, {**audit, **cleared, "promoted_by": by}), str(version)
    else:
        before, after = registry.rollback(audit)
    instance = DagsterInstance.get()
    instance.report_runless_asset_event(champion_moved(
        instance, f"{action} by {by} ({via}): {reason}",
        {"champion_version": after, "previous_champion": before or "none", **audit}))
    return before, after
