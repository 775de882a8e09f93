"""Training a candidate: steps, time caps, the optimizer, and where Lightning runs it."""

from __future__ import annotations

from pydantic import Field, field_validator
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


GRID_AXES = ("seed", "learning_rate", "mix", "size")  # what may vary between one cycle's challengers


class Challengers(Group):
    """Several challengers per cycle: K candidates trained side by side, the best chosen on the sealed eval and
    gated without the optimism of that choice (assets/selection.py)."""

    model_config = SettingsConfigDict(env_prefix="RMI_")

    challengers: int = Field(default=1, ge=1, le=32, description="Candidates trained per cycle, each through its "
                             "own Pipes launch (on a cluster, its own pod). More than one: challenger_selection keeps "
                             "the best on the sealed eval and the gate judges it as RMI_SELECTION_SHARE says.")
    max_parallel_training: int = Field(default=1, ge=1, description="Candidates of one cycle that train at the same "
                                       "time. More than one runs the cycle's steps in processes of their own "
                                       "(Dagster's multiprocess executor, about 3 s of start-up a step); one trains "
                                       "them in turn in the run's process.")
    challenger_grid: dict[str, list] = Field(default_factory=dict, description=(
        "What varies between the candidates (JSON, each axis a list): seed (added to the cycle's seed), "
        "learning_rate, mix (partial RMI_MIX objects laid over the dataset's shares), size (a size other than the "
        "champion's trains a new generation from scratch, taught by it). Candidate i takes the i-th combination "
        "of the axes (the first axis varying slowest); past the last, the combinations repeat with the seed moved "
        "on. Empty: the candidates differ by seed only."))
    selection_share: float = Field(default=0.0, ge=0, lt=1, description="How the best of several candidates is "
                                   "chosen without flattering it. 0 (the default): every candidate answers every "
                                   "sealed item, the best wins, and the gate judges it at its level divided by "
                                   "RMI_CHALLENGERS (Bonferroni; its reported gain leans high). Between 0 and 1: "
                                   "that share of each slice's items chooses and the gate judges the winner on the "
                                   "rest only (an unbiased gain, on fewer items: less power).")

    @field_validator("challenger_grid")
    @classmethod
    def _known_axes(cls, grid: dict[str, list]) -> dict[str, list]:
        """A typo in an axis would train K copies of one candidate: refuse it, naming the axes."""
        from .improvement import SOURCES

        for axis, values in grid.items():
            if axis not in GRID_AXES:
                raise ValueError(f"RMI_CHALLENGER_GRID: unknown axis {axis!r}; the axes are {list(GRID_AXES)}")
            if not isinstance(values, list) or not values:
                raise ValueError(f"RMI_CHALLENGER_GRID: {axis} must be a non-empty list of values")
            for value in values:
                if axis == "learning_rate" and not (isinstance(value, int | float) and value > 0):
                    raise ValueError(f"RMI_CHALLENGER_GRID: learning_rate {value!r} is not a positive number")
                if axis == "seed" and not (isinstance(value, int) and value >= 0):
                    raise ValueError(f"RMI_CHALLENGER_GRID: seed {value!r} is not an integer at or above 0")
                if axis == "size" and not (isinstance(value, str) and value):
                    raise ValueError(f"RMI_CHALLENGER_GRID: size {value!r} is not a size name")
                if axis == "mix" and not (isinstance(value, dict) and set(value) <= set(SOURCES)
                                          and all(isinstance(v, int | float) and v >= 0 for v in value.values())):
                    raise ValueError(f"RMI_CHALLENGER_GRID: mix {value!r} must map training sources "
                                     f"{list(SOURCES)} to shares at or above 0")
        return grid

    def variations(self) -> list[dict]:
        """What each of the `challengers` candidates changes, in order: the grid's combinations, each with a seed
        offset (from the grid, else its index; repeats past the last combination move it on)."""
        import itertools

        axes = [axis for axis in GRID_AXES if axis in self.challenger_grid]
        combos = [dict(zip(axes, values, strict=True))
                  for values in itertools.product(*(self.challenger_grid[a] for a in axes))] or [{}]
        # past the last combination the seeds move on by more than any seed the grid names
        stride = max(self.challenger_grid["seed"]) + 1 if "seed" in axes else len(combos)
        out = []
        for i in range(self.challengers):
            combo = dict(combos[i % len(combos)])
            seed = combo.get("seed", i % len(combos)) + (i // len(combos)) * stride
            out.append({**combo, "seed": seed})
        return out
