"""The candidate model: Lightning training on the latest dataset, warm-started from the champion.

Each training is an MLflow run (params, loss curve, checkpoint) and a registered model version with the
alias `challenger`, tagged so that any model leads back to its dataset, feedback batches, run and code.
"""


import subprocess
from pathlib import Path

from dagster import AssetExecutionContext, Config, MaterializeResult, asset

from .. import layout
from ..resources.registry import ModelRegistry
from ..resources.storage import ObjectStore
from ..settings import Settings
from .dataset import training_dataset


class CandidateConfig(Config):
    """Set by regression_sensor: weight the regressed slices up and train longer."""

    focus: list[str] = []  # slices like "add/5"
    focus_weight: float = 4.0
    steps_multiplier: float = 1.0


@asset(deps=[training_dataset], group_name="training", kinds={"pytorch", "mlflow"})
def candidate_model(context: AssetExecutionContext, config: CandidateConfig, storage: ObjectStore,
                    registry: ModelRegistry) -> MaterializeResult:
    import torch

    from ..ml.train import fit
    from ..recipes.base import load_recipe

    settings = Settings()
    recipe = load_recipe(settings.recipe)
    version = storage.read_json(f"{layout.DATASETS}/latest.json")["version"]
    manifest = storage.read_json(f"{layout.DATASETS}/{version}/manifest.json")
    data = storage.read_parquet(f"{layout.DATASETS}/{version}/train.parquet")
    tokens, mask = recipe.encode(data["prompt"].to_list(), data["target"].to_list())
    weights = torch.tensor(data["weight"].to_numpy())
    if config.focus:
        in_focus = torch.tensor([f"{s}/{t}" in config.focus for s, t in zip(data["skill"], data["tier"], strict=True)])
        weights = torch.where(in_focus, weights * config.focus_weight, weights)

    champion = registry.version("champion")
    steps = int((settings.train_steps if champion else settings.bootstrap_steps) * config.steps_multiplier)
    max_seconds = settings.train_max_seconds if champion else settings.bootstrap_max_seconds
    seed = settings.seed + int(champion.version) if champion else settings.seed
    torch.manual_seed(seed)  # the same dataset and seed give the same candidate
    if champion:  # warm start: the champion's architecture and weights, a fresh optimizer
        checkpoint = registry.load_weights(champion.version)[1]
        module = recipe.build_model(settings.learning_rate, steps, config=checkpoint["config"])
        module.load_state_dict(checkpoint["state_dict"])
    else:
        module = recipe.build_model(settings.learning_rate, steps, size=settings.model_size)
    run_id_dagster = context.run.run_id
    lineage = {
        "dataset_version": version,
        "dataset_uri": storage.uri(f"{layout.DATASETS}/{version}"),
        "feedback_batches": _joined(manifest["batches"]),
        "dagster_run_id": run_id_dagster,
        "code_version": code_version(),
        "recipe": settings.recipe,
        "warm_start_from": champion.version if champion else "scratch",
    }
    with registry.run(f"candidate-{version}", tags=lineage) as run_id:
        client = registry.client()
        params = {"steps": steps, "batch_size": settings.batch_size, "learning_rate": settings.learning_rate,
                  "max_seconds": max_seconds, "seed": seed, "rows": len(data),
                  "focus": ",".join(config.focus) or "none",
                  "parameters": sum(p.numel() for p in module.parameters()), **settings.trainer_options()}
        for key, value in params.items():
            client.log_param(run_id, key, value)

        def report(step: int, total: int, loss: float) -> None:
            client.log_metric(run_id, "train_loss", loss, step=step)
            context.log.info(f"training step {step}/{total} loss {loss:.4f}")

        result = fit(module, tokens, mask, weights, max_steps=steps, max_seconds=max_seconds,
                     batch_size=settings.batch_size, seed=seed, trainer=settings.trainer_options(), report=report)
        metrics = {"final_loss": result.final_loss, "steps_done": result.steps, "train_seconds": result.seconds,
                   "steps_per_second": result.steps / max(result.seconds, 1e-9)}
        for key, value in metrics.items():
            client.log_metric(run_id, key, value)
        mv = registry.register(run_id, module, tags=lineage)
    if result.stopped_by_time:
        context.log.warning(f"training stopped by its time cap after {result.steps}/{steps} steps")
    return MaterializeResult(metadata={
        "model_version": mv.version, "mlflow_run_id": run_id, **lineage,
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()},
        "stopped_by_time": result.stopped_by_time,
    })


def _joined(batches: list[str], limit: int = 4000) -> str:
    text = ",".join(batches)
    return text if len(text) <= limit else f"{len(batches)} batches: see the dataset manifest"


def code_version() -> str:
    """The git commit of the pipeline code, or 'unknown' outside a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
