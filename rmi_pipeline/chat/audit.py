"""Every request `rmi chat` acts on or refuses, one JSON line each in HOME/chat/audit.jsonl: who, when, what, the
outcome. The MLflow tags and Dagster events of an action say the same for the models; this log also keeps the
refusals (a stranger's attempt, a bad command). Never a secret: the signing secret and the token are not in it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path


def audit_path(settings) -> Path:
    return settings.resolved_home / "chat" / "audit.jsonl"


def record(settings, *, user: str, text: str, outcome: str, detail: str, source: str = "slash command") -> None:
    from filelock import FileLock

    path = audit_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"at": datetime.now(UTC).isoformat(), "user": user, "source": source, "text": text[:500],
                       "outcome": outcome, "detail": detail[:1000]})
    with FileLock(f"{path}.lock"):
        with path.open("a") as out:
            out.write(line + "\n")


def read(settings) -> list[dict]:
    path = audit_path(settings)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
