"""`rmi chat`: the Slack app that steers the loop (rmi_pipeline/chat/)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from .base import Group, comma_list


class Chat(Group):
    """`rmi chat`: the Slack app's credentials and who may act from chat."""

    model_config = SettingsConfigDict(env_prefix="RMI_SLACK_")

    signing_secret: SecretStr | None = Field(default=None, description="The Slack app's signing secret: every "
                                             "request to `rmi chat` must be signed with it (within 5 minutes). "
                                             "Never logged.")
    bot_token: SecretStr | None = Field(default=None, description="The Slack app's bot token (xoxb-...). Never "
                                        "logged.")
    allowed_users: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(), description="Comma-separated Slack user ids (U...) who may act from chat; anyone else "
        "may read status only.")

    _lists = field_validator("allowed_users", mode="before")(comma_list)
