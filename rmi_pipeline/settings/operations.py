"""Running the loop by itself: what starts a cycle, the champion's health, regressions, alerts, the UI's links."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from .base import Group


class Automation(Group):
    """What starts an improvement cycle by itself, and how often the sensors look."""

    model_config = SettingsConfigDict(env_prefix="RMI_")

    cycle_min_new_events: int = Field(default=1000, description="New validated feedback events that start an "
                                      "improvement cycle by themselves.")
    feedback_interval_seconds: int = Field(default=5, ge=1, description="How often, under the daemon, "
                                           "new_feedback_sensor and enough_feedback_sensor look: a landed batch "
                                           "waits about this long for its ingest, and ingested feedback for its cycle "
                                           "(Dagster's daemon looks at most every 5 s).")
    sensor_interval_seconds: int = Field(default=30, ge=1, description="How often, under the daemon, every other "
                                         "sensor that moves the loop looks for work (a regression, the canary, health "
                                         "after runs, failed runs, generations, derivatives, deletions).")


class Health(Group):
    """champion_health: the champion's eval and live thumbs-down per slice, against its baseline."""

    model_config = SettingsConfigDict(env_prefix="RMI_HEALTH_")

    cron: str = Field(default="0 * * * *", description="When champion_health runs (also after each ingest).")
    tolerance: float = Field(default=0.10, description="A slice regresses when its eval score falls, or its live "
                             "thumbs-down rate rises, by more than this against the baseline.")
    window_events: int = Field(default=5000, description="Latest rated events of the champion that make its live "
                               "thumbs-down rates.")
    auto_rollback: bool = Field(default=True, description="Roll a new champion back to its predecessor when its live "
                                "thumbs-down on a slice rises significantly over the predecessor's (at the gate's "
                                "confidence, past RMI_CANARY_TOLERANCE); a person is alerted.")


class Regression(Group):
    """A regression-triggered cycle: how many per champion, how far apart, and how it aims at the slices."""

    model_config = SettingsConfigDict(env_prefix="RMI_REGRESSION_")

    budget: int = Field(default=3, description="Regression-triggered cycles per champion before a person is alerted "
                        "instead.")
    backoff_seconds: float = Field(default=300.0, description="Wait before the 2nd attempt; doubles.")
    focus_weight: float = Field(default=4.0, description="How much more a regressed slice's training rows weigh in a "
                                "regression-triggered cycle.")
    steps_multiplier: float = Field(default=2.0, description="Training steps of a regression-triggered cycle, as a "
                                    "multiple of RMI_TRAIN_STEPS.")


class Alerts(Group):
    """Alerts to a person, only when one must act."""

    model_config = SettingsConfigDict(env_prefix="RMI_ALERT_")

    webhook_url: str | None = Field(default=None, description="Slack-compatible webhook for alerts; unset: alerts "
                                    "are only logged.")
    timeout_seconds: float = Field(default=10.0, gt=0, description="How long one post to the alert webhook may take; "
                                   "3 tries, then the alert waits in the outbox.")


class UI(Group):
    """The Dagster UI: where it answers, and what its asset catalog shows."""

    model_config = SettingsConfigDict(env_prefix="RMI_UI_")

    url: str = Field(default="http://127.0.0.1:3000", description="The Dagster webserver: where alerts link runs to, "
                     "and whose GraphQL API `rmi chat` starts cycles and pauses the automation through.")
    asset_owners: str = Field(default="team:ml", description="Comma-separated owners of every asset in the UI's "
                              "catalog: e-mail addresses or team:NAME.")
    code_url: str | None = Field(default=None, description="The repository's web URL (GitHub or GitLab): each asset's "
                                 "code reference in the UI links to its source there at RMI_UI_CODE_BRANCH; unset: to "
                                 "the file on this machine.")
    code_branch: str = Field(default="main", description="The branch or commit RMI_UI_CODE_URL's links point at.")
