"""`rmi serve` and the live trial: the gateway users and apps talk to, and the canary it routes to."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from .base import Group, comma_list


class Serving(Group):
    """`rmi serve`: the alias it serves and follows, batching, the feedback log and its flushes, the gateway's
    limits."""

    model_config = SettingsConfigDict(env_prefix="RMI_SERVE_")

    model: str = Field(default="champion", min_length=1, description="The registry alias the gateway answers "
                       "with and follows: champion, or fast for the champion's smaller, faster derivative.")
    max_batch: int = Field(default=64, ge=1, description="Most prompts decoded in one forward pass.")
    max_wait_ms: float = Field(default=5.0, ge=0, description="The longest lull a gathering batch waits through for "
                               "more requests (a full batch, or one that waited as long as the last pass took, starts "
                               "at once; a lone request waits for none).")
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


class Upstream(Group):
    """`rmi serve --upstream URL`: the gateway in front of an OpenAI-compatible engine (vLLM, SGLang, TGI, llama.cpp,
    Ollama), which answers; the gateway routes each arm to the engine's name for its model and records answers and
    feedback as it does for its own models (docs/how-to/serving.md#in-front-of-your-engine)."""

    model_config = SettingsConfigDict(env_prefix="RMI_SERVE_UPSTREAM_")

    url: str | None = Field(default=None, description="The engine's base URL as an OpenAI client takes it "
                            "(http://127.0.0.1:8001/v1); unset: the gateway answers with its own models. `rmi serve "
                            "--upstream URL` sets it.")
    champion_model: str = Field(default="champion", min_length=1, description="The engine's name for the model "
                                "behind the gateway's alias (RMI_SERVE_MODEL): for vLLM a --lora-modules name or "
                                "the base model's. Unused with RMI_SERVE_UPSTREAM_LOAD_ADAPTERS, which names each "
                                "adapter after its version.")
    canary_model: str = Field(default="canary", min_length=1, description="The engine's name for the canary on "
                              "trial, which answers RMI_CANARY_SHARE of users.")
    challenger_model: str = Field(default="challenger", min_length=1, description="The engine's name for the "
                                  "challenger, asked in the background with RMI_SERVE_SHADOW.")
    api_key: SecretStr | None = Field(default=None, repr=False, exclude=True, description="The engine's own key "
                                      "(sent as 'Authorization: Bearer KEY'), not a client's. Never logged.")
    timeout_seconds: float = Field(default=120.0, gt=0, description="Longest the engine may take over one reply, "
                                   "a stream's last chunk included: past it the client gets 502 (or, mid-stream, an "
                                   "error event) and nothing is recorded.")
    max_reply_bytes: int = Field(default=8_388_608, ge=1024, description="Largest reply read from the engine, a "
                                 "stream's chunks together (502 beyond, nothing recorded).")
    load_adapters: bool = Field(default=False, description="When an alias moves, export the new version's LoRA "
                                "adapter into RMI_SERVE_UPSTREAM_ADAPTER_DIR and load it into the engine with vLLM's "
                                "runtime LoRA API (POST /v1/load_lora_adapter; the engine needs "
                                "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), named NAME-vVERSION; an adapter no arm "
                                "uses any more is unloaded RMI_SERVE_UPSTREAM_TIMEOUT_SECONDS later.")
    adapter_dir: Path | None = Field(default=None, description="Where adapters are exported, one folder per "
                                     "version; default HOME/serve/adapters. The engine must be able to read it.")
    engine_adapter_dir: str | None = Field(default=None, description="RMI_SERVE_UPSTREAM_ADAPTER_DIR as the "
                                           "engine sees it (a volume mounted elsewhere in its container); default "
                                           "the same path.")

    @field_validator("url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError(f"the upstream must be an http:// or https:// base URL, such as "
                             f"http://127.0.0.1:8001/v1; got {url!r}")
        return url.rstrip("/") if url else None


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
