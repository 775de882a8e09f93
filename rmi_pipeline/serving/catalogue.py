"""What `GET /v1/models` lists, and which arm a request's `model` names.

Listed: NAME (the gateway's own choice: its alias, and the canary for its share of users), NAME@ALIAS (the alias
it serves, `champion` by default), NAME@canary while a canary is on trial for that alias, and NAME@challenger while
the challenger answers in shadow; each with the version behind it (and, in front of an engine, the engine's name for
it: `upstream_model`). A request may name the first three (NAME@canary
then always meets the canary); the challenger's answers are never shown, so naming it is refused (400), and any
other name is unknown (404, OpenAI's model_not_found).
"""

from __future__ import annotations

from ..resources.registry import CANARY, CHALLENGER
from .errors import Refused

OWNER = "rmi serve"


def listed(gateway) -> list[dict]:
    """OpenAI model objects, with the alias and version each id answers from now (nothing while no version has
    the gateway's alias)."""
    name, out = gateway.model_name, []
    followed = [(gateway.alias, gateway.model), (CANARY, gateway.canary),
                (CHALLENGER, gateway.shadow.followed if gateway.shadow else None)]
    for alias, model in followed:
        loaded = model.current if model else None
        if loaded is None:
            continue
        entry = {"object": "model", "created": int(loaded.loaded_at), "owned_by": OWNER, "alias": alias,
                 "version": loaded.version, **({"upstream_model": loaded.model} if gateway.upstream else {})}
        if alias == gateway.alias:
            out.append({"id": name, **entry})
        out.append({"id": f"{name}@{alias}", **entry})
    return out


def arm_named(gateway, model: str | None) -> str | None:
    """The arm that answers a request naming `model` (None: the gateway routes it by user), or Refused."""
    name = gateway.model_name
    if model in (None, "", name, f"{name}@{gateway.alias}"):
        return None if model in (None, "", name) else gateway.alias
    if model == f"{name}@{CANARY}" and gateway.canary and gateway.canary.current:
        return CANARY
    if model == f"{name}@{CHALLENGER}" and gateway.shadow:
        raise Refused(400, f"model: {model} answers in shadow only, unseen (its report: GET /v1/shadow); ask "
                      f"{name} instead", param="model", code="model_in_shadow")
    raise Refused(404, f"model: {model!r} is not served here; GET /v1/models lists what is ({name}, or "
                  f"{name}@{gateway.alias})", param="model", code="model_not_found")
