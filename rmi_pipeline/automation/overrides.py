"""A person moves the champion past the gate (`rmi promote`, `rmi rollback`, `/rmi` in Slack), or approves or rejects
a version that waits for them (RMI_PROMOTION=approval), audited in MLflow and Dagster: who, when, why and from where."""

from __future__ import annotations

from datetime import UTC, datetime


def override(settings, action: str, reason: str, by: str, via: str,
             version: str | None = None) -> tuple[str | None, str]:
    """Who, when and why go to MLflow tags and to Dagster; returns (the champion before, the champion now).
    `approve` is `promote` for a version that waits for approval only; a promoted version that waited records
    `approval: approved`, and a promoted canary's trial ends. Refused with a ValueError, before anything moves: no
    reason, a version that is not a number or is already the champion, one approved that does not wait; a
    LookupError: a version that does not exist, nothing to roll back to."""
    from dagster import DagsterInstance

    from ..assets.approval import APPROVAL, WAITING, not_waiting
    from ..assets.probes import SUSPECTED
    from ..assets.promotion import champion_moved
    from ..resources import build_resources
    from ..resources.registry import CANARY, CHAMPION

    audit = _audit(action, reason, by, via)
    registry = build_resources(settings)["registry"]
    current = registry.version(CHAMPION)
    if action in ("promote", "approve"):
        if not str(version).isdigit():
            raise ValueError(f"a model version is a number, not {version!r}")
        if current is not None and str(current.version) == str(version):
            raise ValueError(f"v{version} is already the champion")
        tags = registry.tags_of(version)
        waited = tags.get(APPROVAL) == WAITING
        if action == "approve" and not waited:
            raise ValueError(not_waiting(str(version), tags))
        cleared = {f"{SUSPECTED}_cleared": f"by {by} ({via}): {reason}"} if SUSPECTED in tags else {}
        if waited:  # before the alias moves: a promotion that dies between them never leaves the champion waiting
            registry.tag(version, {APPROVAL: "approved"})
        before, after = registry.promote(version, {**audit, **cleared, "promoted_by": by}), str(version)
        if (canary := registry.version(CANARY)) is not None and str(canary.version) == after:
            registry.end_canary({"canary_outcome": f"promoted by {by}"})
    else:
        before, after = registry.rollback(audit)
    instance = DagsterInstance.get()
    instance.report_runless_asset_event(champion_moved(
        instance, f"{action} by {by} ({via}): {reason}",
        {"champion_version": after, "previous_champion": before or "none", **audit}))
    return before, after


def reject(settings, version: str, reason: str, by: str, via: str) -> tuple[str | None, list[str]]:
    """A person turns down the version that waits for approval, audited like an override (MLflow tags, an
    observation of `champion` in Dagster): `champion` stays, `challenger` and `canary` no longer name it. Returns
    (the champion, the aliases removed). Refused before anything changes: no reason, a version that is not a number
    or does not wait (ValueError), one that does not exist (LookupError)."""
    from dagster import DagsterInstance

    from ..assets.approval import APPROVAL, WAITING, not_waiting
    from ..resources import build_resources
    from ..resources.registry import CHAMPION

    audit = _audit("reject", reason, by, via)
    if not str(version).isdigit():
        raise ValueError(f"a model version is a number, not {version!r}")
    registry = build_resources(settings)["registry"]
    tags = registry.tags_of(version)
    if tags.get(APPROVAL) != WAITING:
        raise ValueError(not_waiting(str(version), tags))
    removed = drop(registry, DagsterInstance.get(), str(version), "rejected", f"v{version} rejected by {by} ({via}): "
                   f"{reason}", audit)
    held = registry.version(CHAMPION)
    return (str(held.version) if held else None), removed


def drop(registry, instance, version: str, outcome: str, description: str,
         tags: dict[str, str]) -> list[str]:
    """End a version's wait with `outcome` (rejected, expired): the aliases that still put it forward, `canary`
    (its users back on the champion) and `challenger`, are removed, then it is tagged, and Dagster records an
    observation of `champion`, which does not move. The tag comes after the aliases, so a drop that dies halfway
    still waits and is done again. Returns the aliases removed."""
    from dagster import AssetObservation

    from ..assets.approval import APPROVAL
    from ..assets.promotion import champion
    from ..resources.registry import CANARY, CHALLENGER, CHAMPION

    removed = []
    for alias in (CANARY, CHALLENGER):
        mv = registry.version(alias)
        if mv is not None and str(mv.version) == str(version):
            if alias == CANARY:
                registry.end_canary({"canary_outcome": outcome})
            else:
                registry.client().delete_registered_model_alias(registry.model_name, alias)
            removed.append(alias)
    registry.tag(version, {APPROVAL: outcome, **tags})
    held = registry.version(CHAMPION)
    instance.report_runless_asset_event(AssetObservation(champion.key, description=description, metadata={
        "version": str(version), APPROVAL: outcome, "champion_version": str(held.version) if held else "none",
        "aliases_removed": ", ".join(removed) or "none", **tags}))
    return removed


def _audit(action: str, reason: str, by: str, via: str) -> dict[str, str]:
    """The tags that say who did what, when, why and from where; no reason, no action."""
    if not reason.strip():
        raise ValueError(f"{action} needs a reason: an override without one is not auditable")
    return {"override_action": action, "override_by": by, "override_via": via,
            "override_at": datetime.now(UTC).isoformat(), "override_reason": reason}
