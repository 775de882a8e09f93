"""Feedback intake: what a batch may hold and how a failed ingest is retried."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from .base import Group


class Feedback(Group):
    """Feedback intake: validation limits and retries of a batch's ingest."""

    model_config = SettingsConfigDict(env_prefix="RMI_FEEDBACK_")

    max_text_chars: int = Field(default=4096, description="Longer text in any field (or meta) is quarantined, not "
                                "truncated; the gateway refuses it with 413.")
    max_bad_share: float = Field(default=0.5, description="A batch with more bad rows than this fails its check.")
    ingest_retries: int = Field(default=3, description="Times a batch whose ingest failed or died is ingested again "
                                "before a person is alerted.")
    ingest_backoff_seconds: float = Field(default=30.0, description="Wait before a batch is ingested again; doubles "
                                          "with each failed attempt.")
