"""Users' words are personal data: what is redacted at ingest, where originals may be kept, how long feedback lives."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from .base import Group, comma_list


class Privacy(Group):
    """Redaction before anything is stored or trained on, a separate store for originals, retention."""

    model_config = SettingsConfigDict(env_prefix="RMI_")

    redact: bool = Field(default=True, description="Replace personal data in every text field of feedback (prompt, "
                         "completion, correction, comment, meta) with typed placeholders such as <EMAIL_ADDRESS> "
                         "before it reaches the warehouse, a batch file or a training row (Presidio: e-mail, phone, "
                         "credit card, IBAN, IP address, RMI_REDACT_PATTERNS, and names and places where a spaCy "
                         "model is installed).")
    redact_patterns: dict[str, str] = Field(default_factory=dict, description="A team's own entities as JSON, name -> "
                                            "regular expression, e.g. {\"EMPLOYEE_ID\": \"\\\\bEMP-\\\\d{6}\\\\b\"}; "
                                            "replaced by <NAME> like the built-in ones.")
    redact_phone_regions: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("US", "GB", "DE", "FR", "IL", "IN", "CA", "BR"), description="Comma-separated regions (ISO 3166 "
        "codes) whose national phone formats are recognized, such as (415) 555-2671 for US; a number written with "
        "its +country code is recognized whatever the region.")
    redact_ner_model: str | None = Field(default=None, description="An installed spaCy pipeline (a package name or "
                                         "a folder) whose named entities (PERSON, LOCATION, ...) are redacted too; "
                                         "unset: the built-in patterns only.")
    redact_originals_url: str | None = Field(default=None, description="Where a batch's original file is moved once "
                                             "redacted, for teams that must keep originals: a folder or s3:// URL "
                                             "with its own access control; unset: originals are deleted.")
    retention_days: int | None = Field(default=None, ge=1, description="Raw feedback older than this many days is "
                                       "deleted everywhere it is kept, as `rmi feedback forget` deletes a user's; "
                                       "unset: kept.")
    retention_cron: str = Field(default="30 3 * * *", description="When the retention schedule runs.")
    forget_allowed: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(), description="Comma-separated Slack user ids who may run `/rmi forget` (deleting a "
        "user's feedback); RMI_SLACK_ALLOWED_USERS alone may not.")

    _comma = field_validator("forget_allowed", "redact_phone_regions", mode="before")(comma_list)

    @field_validator("redact_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: dict[str, str]) -> dict[str, str]:
        """A team's pattern that does not compile, or a name that is not an entity type, is refused now, not at the
        first batch."""
        for name, pattern in patterns.items():
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
                raise ValueError(f"RMI_REDACT_PATTERNS: entity name {name!r} must be upper case, like EMPLOYEE_ID")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"RMI_REDACT_PATTERNS[{name}]: {exc}") from None
        return patterns
