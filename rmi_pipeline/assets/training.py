"""The candidate model: Lightning training on the latest dataset, warm-started from the champion.

Training runs out of this process, in the training program (`python -m rmi_pipeline.training.program`), launched
through Dagster Pipes by the `training_launcher` resource: a local subprocess by default, a Kubernetes pod in a
deployment. The program streams its progress here and reports its metrics and checkpoint; this asset then
registers that checkpoint once, as an MLflow model version with the alias `challenger`, tagged so that any
model leads back to its dataset, feedback batches, run and code.
"""


import functools
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from dagster import AssetExecutionContext, Config, MaterializeResult, PipesClient, PreviewWarning, ResourceParam, asset

from ..resources import layout
from ..resources.registry import CHALLENGER, CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..settings import Settings
from ..training import PROGRAM
from .dataset import training_dataset


class CandidateConfig(Config):
    """Set by regression_sensor (from RMI_REGRESSION_*): weight the regressed slices up and train longer; set by
    `rmi generation` and generation_sensor: a new generation of another size, from scratch."""

    focus: list[str] = []  # slices like "add/5"
    focus_weight: float = 1.0
    steps_multiplier: float = 1.0
    size: str = ""  # a new generation: the recipe's size (or a model directory) trained from scratch; "": warm start
    taught: bool = True  # a new generation learns from the champion's labels and distributions (RMI_TEACH_*)


GENERATION, TEACHER, MODEL_SIZE = "generation", "teacher", "model_size"  # lineage tags of every model version


@asset(deps=[training_dataset], group_name="training", kinds={"pytorch", "mlflow"})
def candidate_model(context: AssetExecutionContext, config: CandidateConfig, settings: ResourceParam[Settings],
                    storage: ObjectStore, registry: ModelRegistry,
                    training_launcher: ResourceParam[PipesClient]) -> MaterializeResult:
    """A challenger trained with Lightning on the latest training dataset, warm-started from the champion (from
    scratch for the first model), through Dagster Pipes; registered in MLflow as a model version @challenger,
    tagged with its dataset, feedback batches, Dagster run, code version, generation, teacher and size. A new
    generation (`rmi generation --size`) is trained from scratch at its size and taught by the champion."""
    champion = registry.version(CHAMPION)
    rules = settings.training
    if config.size:
        if champion is None:
            raise ValueError("a new generation learns from a champion: there is none yet (the first model is "
                             "RMI_TRAIN_MODEL_SIZE's)")
        steps, max_seconds = settings.generations.steps, settings.generations.max_seconds
        shape = Shape(config.size, None, champion if config.taught else None,
                      int(champion.tags.get(GENERATION, 1)) + 1)
    elif champion:
        steps, max_seconds = rules.steps, rules.max_seconds
        shape = Shape(champion.tags.get(MODEL_SIZE, rules.model_size), champion, None,
                      int(champion.tags.get(GENERATION, 1)))
    else:
        steps, max_seconds, shape = rules.bootstrap_steps, rules.bootstrap_max_seconds, Shape(rules.model_size)
    return train(context, settings, storage, registry, training_launcher, shape,
                 int(steps * config.steps_multiplier), max_seconds, config.focus, config.focus_weight)


@dataclass(frozen=True)
class Shape:
    """What a model is trained as: its size, the model version it warm-starts from or the one that teaches it (never
    both), and its generation."""

    size: str
    warm_start: object = None
    teacher: object = None
    generation: int = 1


def train(context: AssetExecutionContext, settings: Settings, storage: ObjectStore, registry: ModelRegistry,
          launcher: PipesClient, shape: Shape, steps: int, max_seconds: float, focus: list[str] = (),
          focus_weight: float = 1.0, alias: str | None = CHALLENGER, tags: dict | None = None) -> MaterializeResult:
    """Train one model through the training program and register it (at `alias`, None: no alias), with its
    lineage; returns the materialization's metadata."""
    from ..ml.seeding import turn_seed

    version = storage.read_json(layout.DATASET_LATEST)["version"]
    manifest = storage.read_json(layout.dataset_manifest(version))
    champion = registry.version(CHAMPION)
    from_version = champion.version if champion else 0
    seed = turn_seed(settings.seed, from_version, registry.candidates_since(from_version))
    run_id_dagster = context.run.run_id
    lineage = {
        "dataset_version": version,
        "dataset_uri": storage.uri(layout.dataset(version)),
        "feedback_batches": _joined(manifest["batches"]),
        "dagster_run_id": run_id_dagster,
        "code_version": code_version(),
        "recipe": settings.recipe,
        "warm_start_from": shape.warm_start.version if shape.warm_start else "scratch",
        GENERATION: str(shape.generation),
        TEACHER: str(shape.teacher.version) if shape.teacher else "none",
        MODEL_SIZE: shape.size,
        **(tags or {}),
    }
    checkpoint_key = layout.candidate_checkpoint(run_id_dagster)
    extras = {
        "recipe": settings.recipe,
        "dataset_version": version,
        "dataset_uri": storage.uri(layout.dataset_rows(version)),
        "mix_weights": manifest["weights"],  # a row's weight by its source
        "storage_options": {"endpoint_url": endpoint} if (endpoint := settings.storage.s3_endpoint_url) else {},
        "warm_start_uri": _warm_start(shape.warm_start.version, storage, registry) if shape.warm_start else None,
        "teach": _teaching(settings, storage, registry, shape.teacher) if shape.teacher else None,
        "checkpoint_uri": storage.uri(checkpoint_key),
        "model_size": shape.size,
        "steps": steps, "max_seconds": max_seconds, "seed": seed,
        "batch_size": settings.training.batch_size, "learning_rate": settings.training.learning_rate,
        "focus": list(focus), "focus_weight": focus_weight,
        "hint_distillation": settings.practice.hint_distillation,
        "kto_beta": settings.training.kto_beta, "dpo_beta": settings.training.dpo_beta,
        "trainer": settings.training.hardware(),
    }
    with registry.run(f"candidate-{version}", tags=lineage) as run_id:
        params = {"steps": steps, "batch_size": settings.training.batch_size,
                  "learning_rate": settings.training.learning_rate,
                  "max_seconds": max_seconds, "seed": seed, "focus": ",".join(focus) or "none"}
        with warnings.catch_warnings():  # Dagster's own Pipes session calls one of its preview APIs
            warnings.simplefilter("ignore", PreviewWarning)
            invocation = launcher.run(context=context, command=PROGRAM, extras=extras)
        reported = {k: v.value for k, v in invocation.get_materialize_result().metadata.items()}
        params |= {"rows": reported["rows"], "parameters": reported["parameters"],
                   **{k.removeprefix("trainer_"): v for k, v in reported.items() if k.startswith("trainer_")}}
        if "distillation" in reported:
            params |= {"distillation": reported["distillation"], "teacher_labels": reported["teacher_labels"]}
        metrics = {k: reported[k] for k in ("final_loss", "steps_done", "train_seconds", "steps_per_second",
                                            "tokens_trained")}
        metrics |= {k: v for k, v in reported.items() if k.startswith(("loss_", "rows_"))}  # per mix source
        registry.log_training(run_id, params, metrics, invocation.get_custom_messages())
        registry.log_dataset(run_id, storage.uri(layout.dataset_rows(version)), version)
        mv = registry.register_model(run_id, storage.read_bytes(checkpoint_key), settings.recipe,
                                     tags={**lineage, "parameters": str(reported["parameters"])}, alias=alias)
    if reported["stopped_by_time"]:
        context.log.warning(f"training stopped by its time cap after {reported['steps_done']}/{steps} steps")
    if "distillation" in reported:
        context.log.info(f"taught by v{shape.teacher.version}: {reported['distillation']}; "
                         f"{reported['teacher_labels']} labels")
    return MaterializeResult(metadata={
        "model_version": str(mv.version), "mlflow_run_id": run_id, **lineage,
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()},
        "parameters": reported["parameters"],
        **{k: reported[k] for k in ("distillation", "teacher_labels") if k in reported},
        "stopped_by_time": reported["stopped_by_time"], "world_size": reported["world_size"],
        "checkpoint": storage.uri(checkpoint_key),
    })


def _teaching(settings: Settings, storage: ObjectStore, registry: ModelRegistry, teacher) -> dict:
    """What the training program needs to be taught by `teacher`: its checkpoint, the slices it is reliable on (from
    its latest sealed-eval scores per slice), and RMI_TEACH_*."""
    from ..ml.distill import reliable_slices

    suite = storage.read_json(layout.EVAL_MANIFEST)["refreshed_version"]
    saved = [key for key in storage.list(f"{layout.EVALUATIONS}/scores/")
             if key.rsplit("/", 1)[-1].startswith(f"v{teacher.version}-")]
    current = layout.slice_scores(str(teacher.version), suite)
    scores = storage.read_json(current if current in saved else saved[-1])["scores"] if saved else {}
    return {"teacher_uri": _warm_start(teacher.version, storage, registry),
            "reliable": reliable_slices(scores, settings.saturation), **settings.teaching.model_dump()}


def _warm_start(version: str, storage: ObjectStore, registry: ModelRegistry) -> str:
    """The champion's checkpoint in the object store, where the training program can read it (copied from the
    registry once per champion: a training pod needs no access to MLflow)."""
    key = layout.champion_checkpoint(version)
    if not storage.exists(key):
        storage.write_bytes(key, registry.checkpoint(version)[1])
    return storage.uri(key)


def _joined(batches: list[str], limit: int = 4000) -> str:
    text = ",".join(batches)
    return text if len(text) <= limit else f"{len(batches)} batches: see the dataset manifest"


@functools.cache
def code_version() -> str:
    """The git commit of the pipeline code this process loaded, or 'unknown' outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
