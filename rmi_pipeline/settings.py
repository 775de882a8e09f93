"""The one settings object: every knob of the loop, read from RMI_* environment variables.

Defaults run the whole loop on one laptop with nothing to set up: files, DuckDB and MLflow's
sqlite store all live under RMI_HOME.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The full method: the champion's own sources are on (README: "How the model improves itself" measures them against
# feedback alone); RMI_MIX='{"practice": 0, "rl": 0, "hint_distill": 0, "self_label": 0}' turns them off.
DEFAULT_MIX = {"feedback": 0.25, "corrections": 0.15, "replay": 0.3, "practice": 0.1, "rl": 0.1,
               "hint_distill": 0.05, "self_label": 0.05}
SOURCES = tuple(DEFAULT_MIX)
DEFAULT_RECIPE = "rmi_pipeline.recipes.arithmetic:ArithmeticRecipe"


# The settings a stage needs, in small typed groups: a stage function takes its group, not the whole object.
@dataclass(frozen=True)
class Gate:
    min_gain: float
    slice_tolerance: float
    confidence: float
    resamples: int
    leak_gap: float
    first_floor: float


@dataclass(frozen=True)
class Practice:
    problems: int  # per skill, over the tiers practised
    tiers: int
    saturation: float
    failed_prompts: int


@dataclass(frozen=True)
class Sampling:
    """Sampled answers: RL's groups, practice's attempts, the coach's unhinted retry."""

    samples: int
    temperature: float


@dataclass(frozen=True)
class SelfLabelling:
    problems: int  # per skill and tier labelled
    votes: int
    temperature: float
    saturation: float
    tiers: int
    past_suite: bool  # label at the edge past the eval suite's top tier too


@dataclass(frozen=True)
class Health:
    tolerance: float
    window_events: int
    auto_rollback: bool


@dataclass(frozen=True)
class Regression:
    """A regression-triggered cycle: how many per champion, how far apart, and how it aims at the slices."""

    budget: int
    backoff_seconds: float
    focus_weight: float
    steps_multiplier: float


@dataclass(frozen=True)
class Canary:
    """The live trial of a challenger that passed the offline gate (assets/canary.py)."""

    promotion: str  # "auto", "canary" or "offline"
    share: float
    min_events: int
    max_hours: float
    tolerance: float


@dataclass(frozen=True)
class Chat:
    """`rmi chat`: the Slack app that steers the loop (rmi_pipeline/chat/)."""

    signing_secret: str = field(repr=False)  # secrets: never in a log line or a traceback
    bot_token: str = field(repr=False)
    allowed_users: frozenset[str]
    ui_url: str  # the Dagster webserver: its GraphQL API starts cycles and pauses the automation


@dataclass(frozen=True)
class Serving:
    """`rmi serve`: batching, following the alias, the feedback log and its flushes, the front door's limits."""

    max_batch: int
    max_wait_ms: float
    threads: int
    reload_seconds: float
    flush_events: int
    flush_seconds: float
    api_keys: tuple[str, ...] = field(repr=False)  # secrets: never in a log line or a traceback
    rate_limit: float
    cors_origins: tuple[str, ...]
    max_body_bytes: int
    max_prompts: int
    max_text_chars: int
    feedback_window_seconds: float
    log_path: Path
    log_max_bytes: int
    canary_share: float  # of users the canary answers while one is on trial
    shadow: bool  # the challenger answers the champion's requests unseen


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RMI_", extra="ignore")

    home: Path = Field(default=Path(".rmi"), description="Where the loop keeps its state by default.")
    cache_dir: Path = Field(default=Path("~/.cache/rmi-pipeline"), validate_default=True, description="What any "
                            "home may reuse and remake at will: the feedback suite as SQL, compiled by Great "
                            "Expectations once per version of the suite and of the libraries, not once per home.")
    storage_url: str | None = Field(default=None, description="Object store root; default file://HOME/store.")
    warehouse_path: Path | None = Field(default=None, description="The warehouse's catalog file (SQLite, a DuckLake "
                                        "catalog); default HOME/warehouse.sqlite. A DuckDB-file warehouse from "
                                        "before (here or HOME/warehouse.duckdb) moves in once.")
    warehouse_catalog: str | None = Field(default=None, description="A DuckLake catalog in PostgreSQL that many "
                                          "writers share, as 'postgres:dbname=... host=... user=...'; the password "
                                          "from PGPASSWORD, never here. Default the file WAREHOUSE_PATH.")
    warehouse_data_url: str | None = Field(default=None, description="Where the warehouse's Parquet files live: "
                                           "a folder or s3://bucket/prefix/; default HOME/warehouse_files/.")
    mlflow_tracking_uri: str | None = Field(default=None, description="Default sqlite:///HOME/mlflow.db.")
    dagster_yaml: Path | None = Field(default=None, description="Dagster instance config that rmi copies into "
                                      "HOME/dagster; default the repo's dagster.yaml (sqlite under HOME).")
    model_name: str = Field(default="rmi-arithmetic", description="Registered model name in MLflow.")
    recipe: str = Field(
        default=DEFAULT_RECIPE,
        description="Import path 'module:Class' of the recipe that brings the model.",
    )
    seed: int = Field(default=0, description="Seeds the seed set, training and the simulated world.")

    # feedback intake
    max_text_chars: int = Field(default=4096, description="Longer text in any field (or meta) is quarantined, "
                                "not truncated.")
    max_bad_share: float = Field(default=0.5, description="A batch with more bad rows than this fails its check.")
    warehouse_lock_timeout_seconds: float = Field(default=300.0, description="How long a writer retries commits "
                                                  "that lost to another writer's before it gives up.")
    ingest_retries: int = Field(default=3, description="Times a batch whose ingest failed or died is ingested "
                                "again before a person is alerted.")
    ingest_backoff_seconds: float = Field(default=30.0, description="Wait before a batch is ingested again; doubles "
                                          "with each failed attempt.")

    # training
    bootstrap_steps: int = Field(default=2000, description="Steps of the first model, trained from scratch.")
    train_steps: int = Field(default=800, description="Steps of each later candidate (warm start).")
    train_max_seconds: float = Field(default=150.0, description="Wall-clock cap per candidate, shared CPUs.")
    bootstrap_max_seconds: float = Field(default=600.0, description="Wall-clock cap of the first model: without "
                                         "it nothing can serve, so it may take longer.")
    batch_size: int = Field(default=64, description="Training rows per step, of up to 64 tokens; a step of "
                            "longer rows holds fewer, as many tokens in all (ml/train.py: ROW_TOKENS).")
    learning_rate: float = Field(default=3e-3, description="Peak AdamW rate (warmup, then cosine to a tenth).")
    gradient_clip: float = Field(default=1.0, ge=0, description="Largest gradient norm a training step applies (0: "
                                 "none): one outlying batch cannot throw a warm-started model off what it knew.")
    accelerator: str = Field(default="auto", description="Lightning accelerator: auto, cpu, gpu.")
    devices: str = Field(default="1", description="Lightning devices: a count, a list like '0,1', or 'auto'.")
    strategy: str = Field(default="auto", description="Lightning strategy: auto, ddp, fsdp, ...")
    precision: str = Field(default="auto", description="auto: bf16-mixed on a GPU, 32-true on a CPU.")
    num_nodes: int = Field(default=1, description="Machines in a distributed training.")
    model_size: str = Field(default="tiny", description="Size of a first model, the recipe's: arithmetic tiny (0.1M, "
                            "CPU) or gpu (85M), both with relative place positions that carry to longer numbers; "
                            "words tiny (0.4M), small (3.6M) or gpu (85M).")
    training_launcher: str = Field(default="warm", description="How candidate_model starts the training program "
                                   "through Dagster Pipes: warm (a forked process of a worker that has torch and "
                                   "Lightning imported: seconds less per candidate), subprocess (a fresh Python "
                                   "every time), or 'module:function' returning a Pipes client such as a "
                                   "PipesK8sClient (deploy/README.md).")
    training_worker_idle_seconds: float = Field(default=600.0, description="How long the warm training worker "
                                                "waits for the next candidate before it exits.")

    # how the model improves itself: the training mix and the sources the champion makes for its successor
    mix: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_MIX), description=(
        "Share of each training batch per source (JSON; 0 turns a source off): feedback (new thumbs-up answers), "
        "corrections (new), replay (the seed set and feedback learned before), practice (harder problems the "
        "champion solved), rl (its sampled answers, scaled by advantage), hint_distill (answers it found with a "
        "coach's hint), self_label (its answers past its reliable range that it backs up)."))
    saturation: float = Field(default=0.9, description="Accuracy at which a tier counts as solved: practice and "
                              "self-labelling move one tier past it.")
    practice_problems: int = Field(default=1000, description="Generated practice problems per skill and cycle, "
                                   "from the first tier not yet solved up (they are also RL's and the coach's; "
                                   "past tier 10, ml.curriculum.FULL_COUNT_TIER, fewer in proportion): "
                                   "where the champion is rarely right, few become rows, and 300 left the "
                                   "top tier short.")
    practice_tiers: int = Field(default=2, ge=1, description="Tiers practised and self-labelled per skill: "
                                "the first not yet solved and this many minus one past it.")
    failed_prompts: int = Field(default=300, description="Latest thumbs-down prompts of the champion that RL and "
                                "the coach retry each cycle.")
    rollout_samples: int = Field(default=8, description="Sampled answers per problem in an RL group.")
    sample_temperature: float = Field(default=0.7, description="Temperature of sampled answers.")
    hint_distillation: Literal["answers", "tokens"] | None = Field(default=None, description=(
        "How hinted successes (hint_distill) teach: 'answers' trains on the hinted answer under the plain prompt; "
        "'tokens' pulls the unhinted model's next-token distributions on that answer toward the hinted model's "
        "(KL; only for recipes whose hints are words). Unset: the recipe's choice."))
    self_label_problems: int = Field(default=1000, description="Problems per skill and tier the champion labels "
                                     "past its reliable range (100 per tier find that edge, fewer past tier 10, at "
                                     "least 30; fewer labelled past tier 10 too): its checks keep a fifth "
                                     "to two fifths of them one tier past it, fewer further out. A mix where "
                                     "self-labels are a large share wants more (self-labelling alone: 8000).")
    self_label_votes: int = Field(default=4, description="Sampled answers per problem besides the greedy one: the "
                                  "candidates a self-label is checked from (without recipe checks, all must agree).")
    self_label_past_suite: bool = Field(default=True, description="A champion reliable up to the eval suite's top "
                                        "tier also labels at its own edge past it, found the same way: a climb's "
                                        "champion answered 400-digit sums while the suite's dense tiers stood at "
                                        "28-64, where its labels taught it nothing new.")

    # evals and the promotion gate
    eval_url: str | None = Field(default=None, description="Sealed eval store (may be another bucket); default "
                                 "file://HOME/evals.")
    eval_items_per_slice: int = Field(default=100, description="Curated eval problems per skill and tier, and per "
                                      "tier the suite grows.")
    eval_lead: int = Field(default=3, ge=1, description="Tiers the eval suite holds past the highest the champion "
                           "solves (RMI_SATURATION on the suite's items): when the champion solves one of the top "
                           "tiers, eval_suite seals the next ones in a new version, up to the recipe's hardest.")
    refreshed_items_per_slice: int = Field(default=100, description="Fresh eval problems per slice each cycle.")
    mined_share: float = Field(default=0.2, description="Share of corrected hard cases held out as the mined slice.")
    ngram_n: int | None = Field(default=None, description="n of the n-gram contamination check for text recipes "
                                "(whitespace tokens); unset: the recipe's (13, the words recipe's short prompts 6).")
    gate_min_gain: float = Field(default=0.0, description="The gain's lower confidence bound must exceed this.")
    gate_slice_tolerance: float = Field(default=0.05, description="A slice falling more than this, significantly, "
                                        "blocks promotion.")
    gate_confidence: float = Field(default=0.98, description="Two-sided level of the paired bootstrap intervals.")
    gate_resamples: int = Field(default=2000, description="Bootstrap resamples.")
    gate_leak_gap: float = Field(default=0.10, description="Public (or anchor) gain beyond the fresh-set gain that "
                                 "marks a likely leak.")
    gate_first_floor: float = Field(default=0.05, description="Score a first model needs with no champion.")

    # automation and alerts
    cycle_min_new_events: int = Field(default=1000, description="New validated feedback events that start an "
                                      "improvement cycle by themselves.")
    alert_webhook_url: str | None = Field(default=None, description="Slack-compatible webhook for alerts; unset: "
                                          "alerts are only logged.")
    alert_timeout_seconds: float = Field(default=10.0, gt=0, description="How long one post to the alert webhook "
                                         "may take; 3 tries, then the alert waits in the outbox.")
    ui_url: str = Field(default="http://127.0.0.1:3000", description="The Dagster webserver: where alerts link runs "
                        "to, and whose GraphQL API `rmi chat` starts cycles and pauses the automation through.")
    asset_owners: str = Field(default="team:ml", description="Comma-separated owners of every asset in the UI's "
                              "catalog: e-mail addresses or team:NAME.")
    code_url: str | None = Field(default=None, description="The repository's web URL (GitHub or GitLab): each asset's "
                                 "code reference in the UI links to its source there at RMI_CODE_BRANCH; unset: to "
                                 "the file on this machine.")
    code_branch: str = Field(default="main", description="The branch or commit RMI_CODE_URL's links point at.")
    sensor_interval_seconds: int = Field(default=30, ge=1, description="How often, under the daemon, each sensor "
                                         "that moves the loop looks for work (new feedback, enough feedback, a "
                                         "regression, the canary, health after runs, failed runs).")
    health_cron: str = Field(default="0 * * * *", description="When champion_health runs (also after each ingest).")
    health_tolerance: float = Field(default=0.10, description="A slice regresses when its eval score falls, or its "
                                    "live thumbs-down rate rises, by more than this against the baseline.")
    health_window_events: int = Field(default=5000, description="Latest rated events of the champion that make "
                                      "its live thumbs-down rates.")
    health_auto_rollback: bool = Field(default=True, description="Roll a new champion back to its predecessor when "
                                       "its live thumbs-down on a slice rises significantly over the predecessor's "
                                       "(at the gate's confidence, past RMI_CANARY_TOLERANCE); a person is alerted.")
    regression_budget: int = Field(default=3, description="Regression-triggered cycles per champion before a "
                                   "person is alerted instead.")
    regression_backoff_seconds: float = Field(default=300.0, description="Wait before the 2nd attempt; doubles.")
    regression_focus_weight: float = Field(default=4.0, description="How much more a regressed slice's training "
                                           "rows weigh in a regression-triggered cycle.")
    regression_steps_multiplier: float = Field(default=2.0, description="Training steps of a regression-triggered "
                                               "cycle, as a multiple of RMI_TRAIN_STEPS.")

    # chat: `rmi chat`, the Slack app
    slack_signing_secret: SecretStr | None = Field(default=None, description="The Slack app's signing secret: "
                                                   "every request to `rmi chat` must be signed with it (within 5 "
                                                   "minutes). Never logged.")
    slack_bot_token: SecretStr | None = Field(default=None, description="The Slack app's bot token (xoxb-...). "
                                              "Never logged.")
    slack_allowed_users: str | None = Field(default=None, description="Comma-separated Slack user ids (U...) who "
                                            "may act from chat; anyone else may read status only.")

    # serving: `rmi serve`, the gateway users and apps talk to
    serve_max_batch: int = Field(default=64, ge=1, description="Most prompts decoded in one forward pass.")
    serve_max_wait_ms: float = Field(default=5.0, ge=0, description="How long a request waits for others to share "
                                     "its forward pass.")
    serve_threads: int = Field(default=1, ge=1, description="CPU threads of the forward pass: one is fastest for "
                               "the default model on a CPU, where the HTTP side needs the other cores "
                               "(bench/serve.py); more for a bigger model.")
    serve_reload_seconds: float = Field(default=10.0, gt=0, description="How often the gateway checks whether the "
                                        "alias moved (a new version is loaded in the background, then swapped in).")
    serve_flush_events: int = Field(default=50_000, ge=1, description="Logged events that make the gateway write "
                                    "a feedback batch file into incoming/. Each batch is a Dagster partition and an "
                                    "ingest run, 0.3-0.7 s of Dagster's whatever its size; 50,000 events take about "
                                    "0.2 s to ingest (bench/ingest.py: about 260k events/s).")
    serve_flush_seconds: float = Field(default=60.0, gt=0, description="Longest an event waits in the gateway's "
                                       "log before its batch file is written.")
    serve_api_keys: SecretStr | None = Field(default=None, description="Comma-separated API keys; when set, every "
                                             "request but /, /healthz, /readyz and /metrics needs one (header "
                                             "'Authorization: Bearer KEY' or 'X-API-Key'). Never logged.")
    serve_rate_limit: float = Field(default=50.0, ge=0, description="Requests per second one API key may make "
                                    "(bursts of twice that); 0: no limit. Applies only when keys are set.")
    serve_cors_origins: str | None = Field(default=None, description="Comma-separated origins a browser app may "
                                           "call the gateway from; unset: none (CORS closed).")
    serve_max_body_bytes: int = Field(default=1_048_576, description="Largest request body (413 beyond).")
    serve_max_prompts: int = Field(default=64, ge=1, description="Most prompts in one request (413 beyond).")
    serve_feedback_window_hours: float = Field(default=168.0, gt=0, description="How long after an answer feedback "
                                               "on it is taken (404 after).")
    serve_log_path: Path | None = Field(default=None, description="The gateway's write-ahead log (SQLite); default "
                                        "HOME/serve/feedback-log.sqlite3, on a local disk.")
    serve_log_max_mb: float = Field(default=1024.0, gt=0, description="Largest the log may grow while the object "
                                    "store is out of reach: beyond it, feedback gets 503 and is not acknowledged.")

    # live trial before promotion
    promotion: Literal["auto", "canary", "offline"] = Field(
        default="auto", description="canary: a challenger that passes the offline gate answers RMI_CANARY_SHARE of "
        "users first, and canary_verdict promotes or aborts it on their thumbs-down; offline: the gate alone "
        "promotes; auto: canary while an `rmi serve` of the champion is running, else offline.")
    canary_share: float = Field(default=0.1, ge=0, le=1, description="Share of users (sticky, by a hash of the "
                                "user id) the gateway sends to the canary.")
    canary_min_events: int = Field(default=2000, ge=1, description="Rated canary answers before the verdict (2,000 "
                                   "per slice find a canary 5 points worse on one of 4 slices in 98% of trials).")
    canary_max_hours: float = Field(default=24.0, gt=0, description="Longest trial: then the verdict is taken on "
                                    "what users said so far.")
    canary_tolerance: float = Field(default=0.0, ge=0, description="Thumbs-down rate a canary may add on a slice "
                                    "before it counts as worse (when significant).")
    shadow: bool = Field(default=False, description="The challenger answers the same requests as the champion in "
                         "the background, never shown to users: agreement, verifier reward and latency per slice "
                         "at the gateway's /v1/shadow.")

    # the simulated world (used by `rmi run` and `rmi simulate`, never by the pipeline)
    sim_queries_per_cycle: int = Field(default=6000, description="Questions users ask per cycle.")
    sim_wrong_user_share: float = Field(default=0.05, description="Users whose verdict is the wrong one.")
    sim_correction_share: float = Field(default=0.6, description="Thumbs-down that carry the right answer.")
    sim_malformed_share: float = Field(default=0.002, description="Lines a buggy client garbles.")
    sim_eval_like_share: float = Field(default=0.02, ge=0, le=1, description="Questions that reuse an eval item's "
                                       "text in another question (where the recipe has such variants: the words "
                                       "recipe), which the n-gram contamination check should keep out of training.")

    # S3 storage (credentials: the standard AWS_* variables, never RMI_*)
    s3_endpoint_url: str | None = Field(
        default=None, description="S3-compatible endpoint for an s3:// RMI_STORAGE_URL (MinIO, a local S3).")

    @field_validator("cache_dir")
    @classmethod
    def _expand(cls, path: Path) -> Path:
        return path.expanduser()

    @field_validator("mix")
    @classmethod
    def _mix_over_defaults(cls, mix: dict[str, float]) -> dict[str, float]:
        """RMI_MIX names only the sources it changes; an unknown name is a typo, not a new source."""
        unknown = set(mix) - set(SOURCES)
        if unknown:
            raise ValueError(f"unknown training sources {sorted(unknown)}; the sources are {list(SOURCES)}")
        if any(v < 0 for v in mix.values()):
            raise ValueError("training mix shares cannot be negative")
        return {**DEFAULT_MIX, **mix}

    def trainer_options(self) -> dict:
        """Lightning Trainer arguments for where training runs."""
        precision = self.precision
        if precision == "auto":
            import torch

            gpu = self.accelerator in ("gpu", "cuda") or (self.accelerator == "auto" and torch.cuda.is_available())
            precision = "bf16-mixed" if gpu else "32-true"
        devices = int(self.devices) if self.devices.isdigit() else self.devices
        return {"accelerator": self.accelerator, "devices": devices, "strategy": self.strategy,
                "precision": precision, "num_nodes": self.num_nodes, "gradient_clip_val": self.gradient_clip or None}

    @property
    def gate(self) -> Gate:
        return Gate(self.gate_min_gain, self.gate_slice_tolerance, self.gate_confidence, self.gate_resamples,
                    self.gate_leak_gap, self.gate_first_floor)

    @property
    def practice(self) -> Practice:
        return Practice(self.practice_problems, self.practice_tiers, self.saturation, self.failed_prompts)

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.rollout_samples, self.sample_temperature)

    @property
    def self_labelling(self) -> SelfLabelling:
        return SelfLabelling(self.self_label_problems, self.self_label_votes, self.sample_temperature,
                             self.saturation, self.practice_tiers, self.self_label_past_suite)

    @property
    def health(self) -> Health:
        return Health(self.health_tolerance, self.health_window_events, self.health_auto_rollback)

    @property
    def regression(self) -> Regression:
        return Regression(self.regression_budget, self.regression_backoff_seconds, self.regression_focus_weight,
                          self.regression_steps_multiplier)

    @property
    def chat(self) -> Chat:
        secret = self.slack_signing_secret.get_secret_value() if self.slack_signing_secret else ""
        token = self.slack_bot_token.get_secret_value() if self.slack_bot_token else ""
        users = frozenset(u.strip() for u in (self.slack_allowed_users or "").split(",") if u.strip())
        return Chat(secret, token, users, self.ui_url)

    @property
    def serving(self) -> Serving:
        keys = self.serve_api_keys.get_secret_value() if self.serve_api_keys else ""
        return Serving(self.serve_max_batch, self.serve_max_wait_ms, self.serve_threads, self.serve_reload_seconds,
                       self.serve_flush_events, self.serve_flush_seconds,
                       tuple(k.strip() for k in keys.split(",") if k.strip()), self.serve_rate_limit,
                       tuple(o.strip() for o in (self.serve_cors_origins or "").split(",") if o.strip()),
                       self.serve_max_body_bytes, self.serve_max_prompts, self.max_text_chars,
                       self.serve_feedback_window_hours * 3600,
                       self.serve_log_path or self.resolved_home / "serve" / "feedback-log.sqlite3",
                       int(self.serve_log_max_mb * 1024 * 1024), self.canary_share, self.shadow)

    @property
    def canary(self) -> Canary:
        return Canary(self.promotion, self.canary_share, self.canary_min_events, self.canary_max_hours,
                      self.canary_tolerance)

    @property
    def resolved_home(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def resolved_storage_url(self) -> str:
        return self.storage_url or f"file://{self.resolved_home / 'store'}"

    @property
    def resolved_eval_url(self) -> str:
        return self.eval_url or f"file://{self.resolved_home / 'evals'}"

    @property
    def resolved_warehouse_path(self) -> Path:
        return self.warehouse_path or self.resolved_home / "warehouse.sqlite"

    @property
    def resolved_tracking_uri(self) -> str:
        return self.mlflow_tracking_uri or f"sqlite:///{self.resolved_home / 'mlflow.db'}"

    @property
    def dagster_home(self) -> Path:
        return self.resolved_home / "dagster"

