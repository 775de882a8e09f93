"""The gateway's routes, one router per API. The keyed ones need an API key while RMI_SERVE_API_KEYS is set; the
open ones are read-only, what probes, scrapers and a browser call without one; the deleting one (privacy) always
needs a key. In front of an engine (`rmi serve --upstream`), UPSTREAM's routers replace KEYED's: the engine
answers."""

from __future__ import annotations

from . import answers, feedback, openai, operations, page, privacy, shadow, upstream

KEYED = (answers.router, openai.router, openai.models_router, feedback.router, shadow.router)
UPSTREAM = (upstream.router, openai.models_router, feedback.router, shadow.router)
OPEN = (operations.router, page.router)
ALWAYS_KEYED = (privacy.router,)  # refused while no key is set: it deletes


def paths() -> frozenset[str]:
    """Every route's path: the labels /metrics counts requests by."""
    return frozenset(route.path for router in KEYED + UPSTREAM + OPEN + ALWAYS_KEYED for route in router.routes)
