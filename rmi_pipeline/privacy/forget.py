"""Deletion on request and retention: one user's feedback, or all feedback past RMI_RETENTION_DAYS, removed from every
store the loop keeps it in, then an audit entry that holds neither the content nor the user's id.

    request_id = request(settings, Scope(user_id="user-42"), by="cli:ana", via="cli", reason="ticket 881")
    audits = complete_pending(settings)   # every request not yet complete, this one among them

A deletion is a request first (privacy/forget/pending/<id>.json in the object store), then steps that are each safe
to run again, each noted in the request once done; the audit entry is written last and the request removed after it.
A process killed anywhere leaves the request, which the next `rmi feedback forget`, the forget sensor's run or the
retention schedule completes first: a deletion is done, or redone, never left half done.

The steps, in order:
    events       the events in scope as the warehouse holds them, kept beside the request: what was made of them
                 is found by their texts once they are gone
    gateway_log  this machine's gateway log (answers kept for the feedback window, events not yet in a batch file)
    batch_files  originals, validated events, quarantined rows and their summaries (batch_files.py)
    warehouse    rows deleted, snapshots expired, files rewritten and cleaned up, the catalog vacuumed
    made         training datasets, practice rows, mined eval items, the judge's verdicts (derived.py)
    chat_audit   the user's id in the Slack app's audit log (asking to forget someone names them)
    check        none left in the warehouse (an ingest that raced the deletion is caught: its files and rows again)
    lineage      the model versions trained on a dataset that held their rows: a team decides whether to retrain
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ..resources import layout
from ..settings import Settings
from .batch_files import forget_in_batches
from .derived import forget_made
from .gateway_log import forget_logged
from .ledger import Ledger
from .scope import Scope

log = logging.getLogger("rmi.privacy")
FORGOTTEN = "<forgotten user>"  # what stands for the user's id where a record of the request must stay
CHECKS = 3  # passes over the batch files and the warehouse when an ingest raced the deletion


def request(settings: Settings, scope: Scope, *, by: str, via: str, reason: str, storage=None) -> str:
    """Record a deletion to be done (durable before anything is deleted); returns its request id."""
    from ..resources import build_resources

    storage = storage or build_resources(settings)["storage"]
    now = datetime.now(UTC)
    request_id = f"{scope.kind}-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    storage.write_json(layout.forget_request(request_id), {
        "request_id": request_id, "scope": scope.to_json(), "requested_by": by, "via": via,
        "reason": reason, "requested_at": now.isoformat(), "attempts": 0, "done": [], "removed": {},
        "datasets": []})
    log.info("deletion %s of %s requested by %s via %s", request_id, scope.describe(), by, via)
    return request_id


def pending(storage) -> list[str]:
    """The requests not yet complete, oldest first."""
    ids = [k.rsplit("/", 1)[-1].removesuffix(".json") for k in storage.list(layout.FORGET_PENDING)
           if k.endswith(".json")]
    return sorted(ids, key=lambda i: i.split("-", 1)[-1])  # by the time in the id, whatever its kind


def complete_pending(settings: Settings, resources: dict | None = None) -> list[dict]:
    """Complete every pending request, oldest first; their audit entries."""
    from ..resources import build_resources

    resources = resources or build_resources(settings)
    return [complete(settings, request_id, resources) for request_id in pending(resources["storage"])]


def forget_user(settings: Settings, user_id: str, *, by: str, via: str, reason: str) -> dict:
    """Request the deletion of one user's feedback and complete it (and any request left before it); its audit."""
    from ..resources import build_resources

    resources = build_resources(settings)
    request_id = request(settings, Scope(user_id=user_id), by=by, via=via, reason=reason,
                         storage=resources["storage"])
    return next(a for a in complete_pending(settings, resources) if a["request_id"] == request_id)


def forget_old(settings: Settings, *, by: str, via: str) -> dict | None:
    """Delete the feedback older than RMI_RETENTION_DAYS, as a request like any other (pending ones first); its
    audit, or None while no retention is set."""
    from ..resources import build_resources

    days = settings.privacy.retention_days
    if days is None:
        return None
    resources = build_resources(settings)
    cutoff = datetime.now(UTC) - timedelta(days=days)
    request_id = request(settings, Scope(before=cutoff), by=by, via=via, reason=f"RMI_RETENTION_DAYS={days}",
                         storage=resources["storage"])
    return next(a for a in complete_pending(settings, resources) if a["request_id"] == request_id)


def complete(settings: Settings, request_id: str, resources: dict) -> dict:
    """Do what is left of one request, step by step, then audit it and remove it; its audit entry."""
    storage, warehouse = resources["storage"], resources["warehouse"]
    key, events_key = layout.forget_request(request_id), layout.forget_events(request_id)
    state = storage.read_json(key)
    scope = Scope.from_json(state["scope"])
    where, params = scope.sql()
    originals = None
    if settings.privacy.redact_originals_url:  # where a team keeps the originals of redacted batches
        from ..resources.storage import ObjectStore

        originals = ObjectStore(url=settings.privacy.redact_originals_url,
                                endpoint_url=settings.storage.s3_endpoint_url)
    ledger = Ledger(storage, key, state, [storage, resources["eval_store"], originals])
    state["attempts"] += 1
    ledger.resume()  # a rewrite a killed run was doing: counted once, whether it happened or not
    ledger.save()
    add = ledger.add

    def events() -> None:
        if not storage.exists(events_key):  # written once: after the warehouse step they are gone from it
            storage.write_parquet(events_key, warehouse.query(
                f"SELECT batch_id, prompt, completion, correction FROM feedback_events WHERE {where}", params))

    def batch_files() -> None:
        forget_in_batches(storage, originals, scope, ledger)

    def made() -> None:
        forget_made(storage, resources["eval_store"], warehouse, settings, storage.read_parquet(events_key), ledger)

    def warehouse_step() -> None:
        warehouse.forget(where, params, on_deleted=lambda n: add({"warehouse_events": n}))

    def check() -> None:
        for _ in range(CHECKS):
            left = int(warehouse.query(f"SELECT count(*) AS n FROM feedback_events WHERE {where}", params)["n"][0])
            if not left:
                return
            log.warning("deletion %s: %d events in scope landed meanwhile; deleting them too", request_id, left)
            batch_files()
            warehouse_step()
        raise RuntimeError(f"deletion {request_id}: events in scope keep landing in the warehouse (an ingest of "
                           "their batch runs again and again?); run it again once ingests are quiet")

    steps: list[tuple[str, Callable[[], None]]] = [
        ("events", events),
        ("gateway_log", lambda: add(forget_logged(settings.resolved_serve_log_path, scope))),
        ("batch_files", batch_files),
        ("warehouse", warehouse_step),
        ("made", made),
        ("chat_audit", lambda: add(_forget_in_chat_audit(settings, scope))),
        ("check", check),
        ("lineage", lambda: state.update(models=trained_on(resources["registry"], state["datasets"]))),
    ]
    for name, step in steps:
        if name not in state["done"]:
            step()
            state["done"].append(name)
            storage.write_json(key, state)
    audit = _audit(storage, state, scope)
    storage.write_json(layout.privacy_audit(request_id), audit)
    storage.delete(events_key)
    storage.delete(key)  # last: until here a killed run leaves the request to be completed
    log.info("deletion %s of %s complete: %s", request_id, scope.describe(), audit["removed"])
    return audit


def trained_on(registry, datasets: list[str]) -> list[dict]:
    """The model versions trained on one of `datasets`, and those warm-started from, taught by or distilled from
    one of them: {"version", "because", "aliases"}, by version."""
    from pathlib import Path

    from mlflow.exceptions import MlflowException

    uri = registry.tracking_uri
    if not datasets or (uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists()):
        return []
    client = registry.client()
    try:
        versions = {str(mv.version): dict(mv.tags) for mv in client.search_model_versions(
            f"name='{registry.model_name}'")}
        aliases = client.get_registered_model(registry.model_name).aliases
    except MlflowException:
        return []
    found = {v: f"trained on dataset {t['dataset_version']}" for v, t in versions.items()
             if t.get("dataset_version") in datasets}
    grown = True
    while grown:  # what learned from a model that learned from the data learned from it too
        grown = False
        for version, tags in versions.items():
            for tag, how in (("warm_start_from", "warm-started from"), ("teacher", "taught by"),
                             ("derivative_of", "distilled from")):
                if version not in found and tags.get(tag) in found:
                    found[version], grown = f"{how} v{tags[tag]}", True
    return [{"version": v, "because": found[v], "aliases": sorted(a for a, av in aliases.items() if str(av) == v)}
            for v in sorted(found, key=int)]


def _audit(storage, state: dict, scope: Scope) -> dict:
    """What the deletion removed and which models learned from it; of the user, only a keyed hash of their id."""
    reason = state["reason"]
    if scope.user_id:
        reason = reason.replace(scope.user_id, FORGOTTEN)
    return {"request_id": state["request_id"], "kind": scope.kind,
            "subject": subject_of(storage, scope.user_id) if scope.user_id else None,
            "older_than": scope.before.isoformat() if scope.before else None,
            "requested_by": state["requested_by"], "via": state["via"], "reason": reason,
            "requested_at": state["requested_at"], "completed_at": datetime.now(UTC).isoformat(),
            "attempts": state["attempts"], "removed": dict(sorted(state["removed"].items())),
            "datasets_changed": state["datasets"], "models_trained_on_it": state.get("models", []),
            "note": "A model already trained keeps what it learned from the deleted feedback: retrain the versions "
                    "listed (or keep them) as your policy says."}


def subject_of(storage, user_id: str) -> str:
    """The audit's `subject` for a user id: HMAC-SHA256 of the id under a key kept in the store (privacy/audit.key).
    Whoever holds the key can tell whether a given user was forgotten; the audit entry alone names no one."""
    if not storage.exists(layout.AUDIT_KEY):
        storage.write_bytes(layout.AUDIT_KEY, secrets.token_hex(32).encode())
    key = storage.read_bytes(layout.AUDIT_KEY).strip()
    return hmac.new(key, user_id.encode(), hashlib.sha256).hexdigest()


def _forget_in_chat_audit(settings: Settings, scope: Scope) -> dict:
    """The user's id replaced in the Slack app's audit log (chat/audit.py: HOME/chat/audit.jsonl), where a request
    to forget them was recorded with its words."""
    import os

    from filelock import FileLock

    path = settings.resolved_home / "chat" / "audit.jsonl"
    if scope.user_id is None or not path.exists():
        return {}
    named = re.compile(rf"(?<![\w-]){re.escape(scope.user_id)}(?![\w-])")
    with FileLock(f"{path}.lock"):
        lines = path.read_text().splitlines(keepends=True)
        changed = sum(bool(named.search(line)) for line in lines)
        if changed:
            partial = path.with_suffix(".jsonl.partial")
            partial.write_text("".join(named.sub(FORGOTTEN, line) for line in lines))
            os.replace(partial, path)
    return {"chat_audit_lines": changed} if changed else {}
