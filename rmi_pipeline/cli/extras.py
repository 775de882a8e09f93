"""The commands that need an optional extra: a missing one is named with the line that installs it, not a traceback."""

from __future__ import annotations

from importlib.util import find_spec

# each extra of pyproject.toml and the modules its commands import
EXTRAS = {
    "serve": ("fastapi", "uvicorn", "aiohttp", "prometheus_client"),
    "chat": ("slack_bolt", "fastapi", "uvicorn"),
}


def require(extra: str, command: str) -> None:
    """Raise RuntimeError (one line from the CLI) when a module of `extra` is not installed."""
    missing = [name for name in EXTRAS[extra] if find_spec(name) is None]
    if missing:
        raise RuntimeError(f"{command} needs the {extra} extra ({', '.join(missing)} not installed): "
                           f"pip install 'rmi-pipeline[{extra}]'")
