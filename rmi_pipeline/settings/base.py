"""What every settings group shares: read from the environment under its own prefix, immutable once read."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class Group(BaseSettings):
    """A group of settings for one concern; each subclass names its `env_prefix`."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True)


def comma_list(value: object) -> object:
    """'a, b,,c' -> ('a', 'b', 'c'): lists in the environment are comma-separated, not JSON."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value
