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
from pathlib import Path

from dagster import AssetExecutionContext, Config, MaterializeResult, PipesClient, PreviewWarning, ResourceParam, asset

from ..resources import layout
from ..resources.registry import CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..settings import Settings
from ..training import PROGRAM
from .dataset import training_dataset


class CandidateConfig(Config):
    """Set by regression_sensor (from RMI_REGRESSION_*): weight the regressed slices up and train longer."""

    focus: list[str] = []  # slices like "add/5"
    focus_weight: float = 1.0
    steps_multiplier: float = 1.0


@asset(deps=[training_dataset], group_name="training", kinds={"pytorch", "mlflow"})
def candidate_model(context: AssetExecutionContext, config: CandidateConfig, settings: ResourceParam[Settings],
                    storage: ObjectStore, registry: ModelRegistry,
                    training_launcher: ResourceParam[PipesClient]) -> MaterializeResult:
    """A challenger trained with Lightning on the latest training dataset, warm-started from the champion (from
    scratch for the first model), through Dagster Pipes; registered in MLflow as a model version @challenger,
    tagged with its dataset, feedback batches, Dagster run and code version."""
    from ..ml.seeding import turn_seed

    version = storage.read_json(layout.DATASET_LATEST)["version"]
    manifest = storage.read_json(layout.dataset_manifest(version))
    champion = registry.version(CHAMPION)
    steps = int((settings.training.steps if champion else settings.training.bootstrap_steps) * config.steps_multiplier)
    max_seconds = settings.training.max_seconds if champion else settings.training.bootstrap_max_seconds
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
        "warm_start_from": champion.version if champion else "scratch",
    }
    checkpoint_key = layout.candidate_checkpoint(run_id_dagster)
    extras = {
        "recipe": settings.recipe,
        "dataset_version": version,
        "dataset_uri": storage.uri(layout.dataset_rows(version)),
        "mix_weights": manifest["weights"],  # a row's weight by its source
        "storage_options": {"endpoint_url": endpoint} if (endpoint := settings.storage.s3_endpoint_url) else {},
        "warm_start_uri": _warm_start(champion.version, storage, registry) if champion else None,
        "checkpoint_uri": storage.uri(checkpoint_key),
        "model_size": settings.training.model_size,
        "steps": steps, "max_seconds": max_seconds, "seed": seed,
        "batch_size": settings.training.batch_size, "learning_rate": settings.training.learning_rate,
        "focus": list(config.focus), "focus_weight": config.focus_weight,
        "hint_distillation": settings.practice.hint_distillation,
        "kto_beta": settings.training.kto_beta, "dpo_beta": settings.training.dpo_beta,
        "trainer": settings.training.hardware(),
    }
    with registry.run(f"candidate-{version}", tags=lineage) as run_id:
        params = {"steps": steps, "batch_size": settings.training.batch_size,
                  "learning_rate": settings.training.learning_rate,
                  "max_seconds": max_seconds, "seed": seed, "focus": ",".join(config.focus) or "none"}
        with warnings.catch_warnings():  # Dagster's own Pipes session calls one of its preview APIs
            warnings.simplefilter("ignore", PreviewWarning)
            invocation = training_launcher.run(context=context, command=PROGRAM, extras=extras)
        reported = {k: v.value for k, v in invocation.get_materialize_result().metadata.items()}
        params |= {"rows": reported["rows"], "parameters": reported["parameters"],
                   **{k.removeprefix("trainer_"): v for k, v in reported.items() if k.startswith("trainer_")}}
        metrics = {k: reported[k] for k in ("final_loss", "steps_done", "train_seconds", "steps_per_second",
                                            "tokens_trained")}
        metrics |= {k: v for k, v in reported.items() if k.startswith(("loss_", "rows_"))}  # per mix source
        registry.log_training(run_id, params, metrics, invocation.get_custom_messages())
        registry.log_dataset(run_id, storage.uri(layout.dataset_rows(version)), version)
        mv = registry.register_model(run_id, storage.read_bytes(checkpoint_key), settings.recipe, tags=lineage)
    if reported["stopped_by_time"]:
        context.log.warning(f"training stopped by its time cap after {reported['steps_done']}/{steps} steps")
    return MaterializeResult(metadata={
        "model_version": str(mv.version), "mlflow_run_id": run_id, **lineage,
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()},
        "stopped_by_time": reported["stopped_by_time"], "world_size": reported["world_size"],
        "checkpoint": storage.uri(checkpoint_key),
    })


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
