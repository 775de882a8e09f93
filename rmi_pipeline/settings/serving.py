"""`rmi serve` and the live trial: the gateway users and apps talk to, and the canary it routes to."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from .base import Group, comma_list


class Serving(Group):
    """`rmi serve`: the alias it serves and follows, batching, the feedback log and its flushes, the gateway's
    limits."""

    model_config = SettingsConfigDict(env_prefix="RMI_SERVE_")

    model: str = Field(default="champion", min_length=1, description="The registry alias the gateway answers "
                       "with and follows: champion, or fast for the champion's smaller, faster derivative.")
    max_batch: int = Field(default=64, ge=1, description="Most prompts decoded in one forward pass.")
    max_wait_ms: float = Field(default=5.0, ge=0, description="How long a request waits for others to share its "
                               "forward pass.")
    threads: int = Field(default=1, ge=1, description="CPU threads of the forward pass: one is fastest for the "
                         "default model on a CPU, where the HTTP side needs the other cores (bench/serve.py); more "
                         "for a bigger model.")
    reload_seconds: float = Field(default=10.0, gt=0, description="How often the gateway checks whether the alias "
                                  "moved (a new version is loaded in the background, then swapped in).")
    flush_events: int = Field(default=50_000, ge=1, description="Logged events that make the gateway write a "
                              "feedback batch file into incoming/. Each batch is a Dagster partition and an ingest "
                              "run, which costs Dagster 0.3-0.7 s whatever its size (bench/ingest.py).")
    flush_seconds: float = Field(default=60.0, gt=0, description="Longest an event waits in the gateway's log before "
                                 "its batch file is written.")
    api_keys: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), repr=False, exclude=True, description="Comma-separated API keys; when set, every request but /, "
        "/healthz, /readyz and /metrics needs one (header 'Authorization: Bearer KEY' or 'X-API-Key'). Never logged.")
    rate_limit: float = Field(default=50.0, ge=0, description="Requests per second one API key may make (bursts of "
                              "twice that); 0: no limit. Applies only when keys are set.")
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), description="Comma-separated origins a browser app may call the gateway from; unset: none (CORS "
        "closed).")
    max_body_bytes: int = Field(default=1_048_576, description="Largest request body (413 beyond).")
    max_prompts: int = Field(default=64, ge=1, description="Most prompts in one request (413 beyond).")
    feedback_window_hours: float = Field(default=168.0, gt=0, description="How long after an answer feedback on it "
                                         "is taken (404 after).")
    log_path: Path | None = Field(default=None, description="The gateway's write-ahead log (SQLite); default "
                                  "HOME/serve/feedback-log.sqlite3, on a local disk.")
    log_max_mb: float = Field(default=1024.0, gt=0, description="Largest the log may grow while the object store is "
                              "out of reach: beyond it, feedback gets 503 and is not acknowledged.")
    explore_share: float = Field(default=0.0, ge=0, le=1, description="Share of answers sampled at "
                                 "RMI_SERVE_EXPLORE_TEMPERATURE instead of greedy: users' thumbs then rate more than "
                                 "the champion's first choice, which learning from thumbs needs (bench/thumbs.py "
                                 "measures it); 0: every answer greedy.")
    explore_temperature: float = Field(default=0.7, gt=0, description="Temperature of the explored answers (each "
                                       "logged with it and its seed).")
    shadow: bool = Field(default=False, description="The challenger answers the same requests as the champion in the "
                         "background, never shown to users: agreement, verifier reward and latency per slice at the "
                         "gateway's /v1/shadow.")

    _lists = field_validator("api_keys", "cors_origins", mode="before")(comma_list)

    @property
    def feedback_window_seconds(self) -> float:
        return self.feedback_window_hours * 3600

    @property
    def log_max_bytes(self) -> int:
        return int(self.log_max_mb * 1024 * 1024)


class Canary(Group):
    """The live trial of a challenger that passed the offline gate (assets/canary.py)."""

    model_config = SettingsConfigDict(env_prefix="RMI_CANARY_")

    share: float = Field(default=0.1, ge=0, le=1, description="Share of users (sticky, by a hash of the user id) "
                         "the gateway sends to the canary.")
    min_events: int = Field(default=2000, ge=1, description="Rated canary answers before the verdict (2,000 per slice "
                            "find a canary 5 points worse on one of 4 slices in 98% of trials).")
    max_hours: float = Field(default=24.0, gt=0, description="Longest trial: then the verdict is taken on what users "
                             "said so far.")
    tolerance: float = Field(default=0.0, ge=0, description="Thumbs-down rate a canary may add on a slice before it "
                             "counts as worse (when significant).")
