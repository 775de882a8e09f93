"""Training a candidate: steps, time caps, the optimizer, and where Lightning runs it."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from .base import Group


class Training(Group):
    """Training a candidate: how long, how, and on which hardware (Lightning's Trainer)."""

    model_config = SettingsConfigDict(env_prefix="RMI_TRAIN_")

    bootstrap_steps: int = Field(default=2000, description="Steps of the first model, trained from scratch.")
    steps: int = Field(default=800, description="Steps of each later candidate (warm start).")
    max_seconds: float = Field(default=150.0, description="Wall-clock cap per candidate, shared CPUs.")
    bootstrap_max_seconds: float = Field(default=600.0, description="Wall-clock cap of the first model: without it "
                                         "nothing can serve, so it may take longer.")
    batch_size: int = Field(default=64, description="Training rows per step, of up to 64 tokens; a step of longer "
                            "rows holds fewer, as many tokens in all (ml/train.py: ROW_TOKENS).")
    learning_rate: float = Field(default=3e-3, description="Peak AdamW rate (warmup, then cosine to a tenth).")
    gradient_clip: float = Field(default=1.0, ge=0, description="Largest gradient norm a training step applies (0: "
                                 "none): one outlying batch cannot throw a warm-started model off what it knew.")
    kto_beta: float = Field(default=0.1, gt=0, description="KTO's beta, when the mix gives thumbs_down or "
                            "asked_again a share: how sharply a thumbs-up or thumbs-down answer's log-probability "
                            "ratio to the warm-start model saturates its loss (larger: the model may stray less from "
                            "the warm start before the loss stops pulling; TRL's default).")
    dpo_beta: float = Field(default=0.1, gt=0, description="DPO's beta, when the mix gives pairs a share: how sharply "
                            "a pair's margin (its chosen answer's log-probability ratio to the warm-start model less "
                            "its rejected one's) saturates its loss (larger: the model may stray less from the warm "
                            "start before a pair stops pulling; TRL's default).")
    accelerator: str = Field(default="auto", description="Lightning accelerator: auto, cpu, gpu.")
    devices: str = Field(default="1", description="Lightning devices: a count, a list like '0,1', or 'auto'.")
    strategy: str = Field(default="auto", description="Lightning strategy: auto, ddp, fsdp, ...")
    precision: str = Field(default="auto", description="auto: bf16-mixed on a GPU, 32-true on a CPU.")
    num_nodes: int = Field(default=1, description="Machines in a distributed training.")
    model_size: str = Field(default="tiny", description="Size of a first model, the recipe's: arithmetic tiny (0.1M, "
                            "CPU) or gpu (85M); words tiny (0.4M), small (3.6M) or gpu (85M).")
    launcher: str = Field(default="warm", description="How candidate_model starts the training program through "
                          "Dagster Pipes: warm (a forked process of a worker that has torch and Lightning imported: "
                          "seconds less per candidate), subprocess (a fresh Python every time), or 'module:function' "
                          "returning a Pipes client such as a PipesK8sClient (docs: the production profile).")
    worker_idle_seconds: float = Field(default=600.0, description="How long the warm training worker waits for the "
                                       "next candidate before it exits.")

    def hardware(self) -> dict:
        """What the training program needs to build its Trainer where it runs."""
        return self.model_dump(include={"accelerator", "devices", "strategy", "precision", "num_nodes",
                                        "gradient_clip"})

    def trainer_options(self) -> dict:
        """Lightning Trainer arguments for where training runs ("auto" precision resolved on this machine)."""
        precision = self.precision
        if precision == "auto":
            import torch

            gpu = self.accelerator in ("gpu", "cuda") or (self.accelerator == "auto" and torch.cuda.is_available())
            precision = "bf16-mixed" if gpu else "32-true"
        devices = int(self.devices) if self.devices.isdigit() else self.devices
        return {"accelerator": self.accelerator, "devices": devices, "strategy": self.strategy,
                "precision": precision, "num_nodes": self.num_nodes, "gradient_clip_val": self.gradient_clip or None}
