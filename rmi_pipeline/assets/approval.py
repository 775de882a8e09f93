"""A person's approval before promotion (RMI_PROMOTION=approval).

Where the gate (`champion`) or the canary's verdict (`canary_verdict`) would move the alias `champion`, the version
waits for a person instead: MLflow version tags say so and since when, and an alert carries Approve and Reject
buttons. `rmi promote` or Approve moves the alias through the audited override, `rmi reject` or Reject drops the
version (both in automation/overrides.py); approval_deadline_sensor drops one left waiting past RMI_APPROVAL_HOURS. A
canary that waits keeps answering its share of users and canary_verdict keeps judging it: the evidence a person
decides on only grows, and a canary its users find worse is aborted before anyone approves it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ..resources.notifier import Notifier
from ..resources.registry import ModelRegistry

APPROVAL = "approval"  # version tag: waiting, then approved, rejected, expired, superseded or aborted (by its canary)
WAITING = "waiting"
REQUESTED_AT = "approval_requested_at"  # version tag: when it began to wait for a person (ISO 8601, UTC)


def waiting(registry: ModelRegistry):
    """The version that waits for a person, or None: one search of the registry by tag, cheap enough for every
    sensor tick."""
    found = registry.client().search_model_versions(
        f"name='{registry.model_name}' and tags.{APPROVAL} = '{WAITING}'", order_by=["version_number DESC"],
        max_results=1)
    return found[0] if found else None


def window(mv, hours: float) -> tuple[datetime, datetime]:
    """(since, until): when `mv` began to wait, and when approval_deadline_sensor drops it."""
    since = datetime.fromisoformat(mv.tags[REQUESTED_AT])
    return since, since + timedelta(hours=hours)


def waiting_line(mv, hours: float) -> str:
    """What `rmi status` and `/rmi status` say of a waiting version."""
    since, until = window(mv, hours)
    return (f"v{mv.version} waits for a person's approval since {since:%Y-%m-%d %H:%M} UTC, until "
            f"{until:%Y-%m-%d %H:%M} UTC")


def request_approval(context, hours: float, registry: ModelRegistry, notifier: Notifier, version: str,
                     champion: str | None, why: str) -> bool:
    """Mark `version` as waiting for a person and alert once with Approve and Reject buttons; `champion` stays.
    A version is asked about once: one already decided is left as it is, so a second run of the gate or a later
    verdict cannot undo a person's decision. One waits at a time: a newer one supersedes it (the older one was
    evaluated against a champion a person may have moved since). Returns whether it asked now."""
    decided = registry.tags_of(version).get(APPROVAL)
    if decided is not None:
        context.log.info(f"v{version} passed, and is not asked about again (approval: {decided})")
        return False
    earlier = waiting(registry)
    if earlier is not None:
        registry.tag(earlier.version, {APPROVAL: "superseded", "approval_reason": f"v{version} passed after it"})
    now = datetime.now(UTC)
    registry.tag(version, {APPROVAL: WAITING, REQUESTED_AT: now.isoformat(),
                           "approval_requested_in_dagster_run": context.run.run_id})
    until, held = now + timedelta(hours=hours), f"v{champion}" if champion else "none"
    context.log.info(f"v{version} passed and waits for a person's approval until {until:%Y-%m-%d %H:%M} UTC; "
                     f"the champion stays {held}. {why}")
    notifier.notify("approval", f"v{version} waits for a person's approval to become champion (now {held}) "
                    f"until {until:%Y-%m-%d %H:%M} UTC; unanswered, it is dropped. {why} Approve: `rmi promote "
                    f"{version} --reason ...`; reject: `rmi reject {version} --reason ...`.",
                    key=f"approval-{version}", run_id=context.run.run_id,
                    actions={"rmi_approve": {"version": version}, "rmi_reject": {"version": version}})
    return True


def not_waiting(version: str, tags: dict) -> str:
    """Why a person's approval or rejection of `version` is refused."""
    return f"v{version} does not wait for approval" + (f" (approval: {tags[APPROVAL]})" if APPROVAL in tags else "")
