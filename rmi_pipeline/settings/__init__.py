"""The one settings object: every knob of the loop, read from RMI_* environment variables, in groups by concern.

Each group reads its own prefix (RMI_GATE_*, RMI_SERVE_*, ...) and a stage takes its group, not the whole object.
Defaults run the whole loop on one laptop with nothing to set up: files, DuckDB and MLflow's sqlite store all live
under RMI_HOME. docs/reference/settings.md lists every variable, generated from these classes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .chat import Chat
from .evals import Evals, Gate, Judge, Probes
from .feedback import Feedback
from .generations import Derivative, Generations, Teaching
from .improvement import DEFAULT_MIX, SOURCES, Practice, RewardModel, Sampling, SelfLabelling
from .operations import UI, Alerts, Automation, Health, Regression
from .privacy import Privacy
from .serving import Canary, Serving, Upstream
from .simulation import Simulation
from .stores import Storage, Warehouse
from .training import Challengers, Training

DEFAULT_RECIPE = "rmi_pipeline.recipes.arithmetic:ArithmeticRecipe"

# Variables whose names changed when the settings were grouped: a set old name stops the program with the new one.
RENAMED = {
    "RMI_S3_ENDPOINT_URL": "RMI_STORAGE_S3_ENDPOINT_URL",
    "RMI_MAX_TEXT_CHARS": "RMI_FEEDBACK_MAX_TEXT_CHARS",
    "RMI_MAX_BAD_SHARE": "RMI_FEEDBACK_MAX_BAD_SHARE",
    "RMI_INGEST_RETRIES": "RMI_FEEDBACK_INGEST_RETRIES",
    "RMI_INGEST_BACKOFF_SECONDS": "RMI_FEEDBACK_INGEST_BACKOFF_SECONDS",
    "RMI_BOOTSTRAP_STEPS": "RMI_TRAIN_BOOTSTRAP_STEPS",
    "RMI_BOOTSTRAP_MAX_SECONDS": "RMI_TRAIN_BOOTSTRAP_MAX_SECONDS",
    "RMI_BATCH_SIZE": "RMI_TRAIN_BATCH_SIZE",
    "RMI_LEARNING_RATE": "RMI_TRAIN_LEARNING_RATE",
    "RMI_GRADIENT_CLIP": "RMI_TRAIN_GRADIENT_CLIP",
    "RMI_ACCELERATOR": "RMI_TRAIN_ACCELERATOR",
    "RMI_DEVICES": "RMI_TRAIN_DEVICES",
    "RMI_STRATEGY": "RMI_TRAIN_STRATEGY",
    "RMI_PRECISION": "RMI_TRAIN_PRECISION",
    "RMI_NUM_NODES": "RMI_TRAIN_NUM_NODES",
    "RMI_MODEL_SIZE": "RMI_TRAIN_MODEL_SIZE",
    "RMI_TRAINING_LAUNCHER": "RMI_TRAIN_LAUNCHER",
    "RMI_TRAINING_WORKER_IDLE_SECONDS": "RMI_TRAIN_WORKER_IDLE_SECONDS",
    "RMI_FAILED_PROMPTS": "RMI_PRACTICE_FAILED_PROMPTS",
    "RMI_HINT_DISTILLATION": "RMI_PRACTICE_HINT_DISTILLATION",
    "RMI_ROLLOUT_SAMPLES": "RMI_SAMPLE_ROLLOUTS",
    "RMI_REFRESHED_ITEMS_PER_SLICE": "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE",
    "RMI_MINED_SHARE": "RMI_EVAL_MINED_SHARE",
    "RMI_NGRAM_N": "RMI_EVAL_NGRAM_N",
    "RMI_ASSET_OWNERS": "RMI_UI_ASSET_OWNERS",
    "RMI_CODE_URL": "RMI_UI_CODE_URL",
    "RMI_CODE_BRANCH": "RMI_UI_CODE_BRANCH",
    "RMI_SHADOW": "RMI_SERVE_SHADOW",
}


def _group(cls: type, description: str):
    return Field(default_factory=cls, description=description)


class Settings(BaseSettings):
    """The loop as a whole (RMI_*), then one group per concern, each with its own prefix."""

    model_config = SettingsConfigDict(env_prefix="RMI_", extra="ignore")

    home: Path = Field(default=Path(".rmi"), description="Where the loop keeps its state by default.")
    cache_dir: Path = Field(default=Path("~/.cache/rmi-pipeline"), validate_default=True, description="What any "
                            "home may reuse and remake at will: the feedback suite as SQL, compiled by Great "
                            "Expectations once per version of the suite and of the libraries, and an empty MLflow "
                            "database per MLflow version, not once per home.")
    recipe: str = Field(default=DEFAULT_RECIPE, description="Import path 'module:Class' of the recipe that brings "
                        "the model.")
    model_name: str = Field(default="rmi-arithmetic", description="Registered model name in MLflow.")
    seed: int = Field(default=0, description="Seeds the seed set, training and the simulated world.")
    mix: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_MIX), description=(
        "Share of each training batch per source (JSON; names only the sources it changes; 0 turns a source off): "
        "feedback (new thumbs-up answers), corrections (new), replay (the seed set and feedback learned before), "
        "practice (harder problems the champion solved), rl (its sampled answers, scaled by advantage), "
        "hint_distill (answers it found with a coach's hint), self_label (its answers past its reliable range that "
        "it backs up), thumbs_down (new thumbs-down answers without a correction, made less likely by KTO against "
        "the warm-start model, while new thumbs-up answers also become KTO-desirable; default 0.15), pairs (new "
        "preference pairs trained by DPO against the warm-start model: a correction over the answer it corrects, a "
        "thumbs-up answer over a different thumbs-down answer to the same prompt; default 0: off), copied and "
        "asked_again (weak labels from implicit signals of new unrated answers: one copied is imitated, and "
        "KTO-desirable, like a thumbs-up; one asked again within a minute is made less likely by KTO like a "
        "thumbs-down; default 0: off), best_of_n (the champion's sampled answers that a reward model trained on "
        "users' ratings ranks best; default 0: off)."))
    saturation: float = Field(default=0.9, description="Accuracy at which a tier counts as solved: practice and "
                              "self-labelling move one tier past it, the eval suite grows past it.")
    promotion: Literal["auto", "canary", "offline", "approval"] = Field(
        default="auto", description="canary: a challenger that passes the offline gate answers RMI_CANARY_SHARE of "
        "users first, and canary_verdict promotes or aborts it on their thumbs-down; offline: the gate alone "
        "promotes; auto: canary while an `rmi serve` of the champion is running, else offline; approval: auto's "
        "route, but where it would promote, the version waits for a person to approve or reject it (`rmi promote`, "
        "`rmi reject`, the alert's buttons in Slack).")
    approval_hours: float = Field(default=72.0, gt=0, description="With RMI_PROMOTION=approval: how long a version "
                                  "waits for a person; past it, approval_deadline_sensor drops it (no alias moves to "
                                  "it) and alerts.")
    mlflow_tracking_uri: str | None = Field(default=None, description="Default sqlite:///HOME/mlflow.db.")
    dagster_yaml: Path | None = Field(default=None, description="Dagster instance config that rmi copies into "
                                      "HOME/dagster; default the repo's dagster.yaml (sqlite under HOME).")

    storage: Storage = _group(Storage, "The object store.")
    warehouse: Warehouse = _group(Warehouse, "The feedback warehouse.")
    feedback: Feedback = _group(Feedback, "Feedback intake.")
    privacy: Privacy = _group(Privacy, "Personal data: redaction, originals, retention.")
    training: Training = _group(Training, "Training a candidate.")
    candidates: Challengers = _group(Challengers, "Several challengers per cycle.")
    practice: Practice = _group(Practice, "Practice at the champion's frontier.")
    sampling: Sampling = _group(Sampling, "Sampled answers.")
    self_labelling: SelfLabelling = _group(SelfLabelling, "Self-labels past the champion's reliable range.")
    reward: RewardModel = _group(RewardModel, "The reward model from users' ratings.")
    teaching: Teaching = _group(Teaching, "How the champion teaches a model trained from scratch.")
    generations: Generations = _group(Generations, "New generations trained from scratch.")
    derivative: Derivative = _group(Derivative, "The fast derivative for serving.")
    evals: Evals = _group(Evals, "The sealed eval suite.")
    gate: Gate = _group(Gate, "The offline promotion gate.")
    probes: Probes = _group(Probes, "Reward-hacking probes on every challenger.")
    judge: Judge = _group(Judge, "The judge model.")
    canary: Canary = _group(Canary, "The live trial.")
    automation: Automation = _group(Automation, "What starts a cycle by itself.")
    health: Health = _group(Health, "The champion's health.")
    regression: Regression = _group(Regression, "Regression-triggered cycles.")
    alerts: Alerts = _group(Alerts, "Alerts to a person.")
    ui: UI = _group(UI, "The Dagster UI.")
    serving: Serving = _group(Serving, "`rmi serve`, the gateway.")
    upstream: Upstream = _group(Upstream, "`rmi serve --upstream`, the gateway in front of an engine.")
    chat: Chat = _group(Chat, "`rmi chat`, the Slack app.")
    simulation: Simulation = _group(Simulation, "The simulated world's users.")

    @model_validator(mode="before")
    @classmethod
    def _no_renamed_variables(cls, data: object) -> object:
        """A variable set under its old name would be ignored silently: refuse it, naming the new one."""
        old = sorted(name for name in RENAMED if name in os.environ)
        if old:
            raise ValueError("settings renamed: " + ", ".join(f"{name} is now {RENAMED[name]}" for name in old))
        return data

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

    @property
    def resolved_home(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def resolved_storage_url(self) -> str:
        return self.storage.url or f"file://{self.resolved_home / 'store'}"

    @property
    def resolved_eval_url(self) -> str:
        return self.evals.url or f"file://{self.resolved_home / 'evals'}"

    @property
    def resolved_warehouse_path(self) -> Path:
        return self.warehouse.path or self.resolved_home / "warehouse.sqlite"

    @property
    def resolved_tracking_uri(self) -> str:
        return self.mlflow_tracking_uri or f"sqlite:///{self.resolved_home / 'mlflow.db'}"

    @property
    def resolved_serve_log_path(self) -> Path:
        return self.serving.log_path or self.resolved_home / "serve" / "feedback-log.sqlite3"

    @property
    def dagster_home(self) -> Path:
        return self.resolved_home / "dagster"



__all__ = ["DEFAULT_MIX", "DEFAULT_RECIPE", "RENAMED", "SOURCES", "UI", "Alerts", "Automation", "Canary", "Challengers",
           "Chat", "Derivative", "Evals", "Feedback", "Gate", "Generations", "Health", "Judge", "Practice", "Privacy",
           "Probes", "Regression", "RewardModel", "Sampling", "SelfLabelling", "Serving", "Settings", "Simulation",
           "Storage", "Teaching", "Training", "Upstream", "Warehouse"]
