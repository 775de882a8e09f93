"""The candidate models: Lightning training on the latest dataset, warm-started from the champion.

Training runs out of this process, in the training program (`python -m rmi_pipeline.training.program`), launched
through Dagster Pipes by the `training_launcher` resource: a local subprocess by default, a Kubernetes pod in a
deployment. The program streams its progress here and reports its metrics and checkpoint; this asset then
registers that checkpoint once, as an MLflow model version, tagged so that any model leads back to its dataset,
feedback batches, run and code. One candidate takes the alias `challenger`; several (RMI_CHALLENGERS) fan out as
Dagster's dynamic outputs, one step and one Pipes launch each, and wait for challenger_selection.
"""


import functools
import json
import subprocess
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from dagster import (
    AssetIn,
    Config,
    ConfigMapping,
    DynamicOut,
    DynamicOutput,
    In,
    MetadataValue,
    Nothing,
    OpExecutionContext,
    Out,
    Output,
    PipesClient,
    PreviewWarning,
    ResourceParam,
    graph_asset,
    op,
)

from ..resources import layout
from ..resources.registry import CHALLENGER, CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..settings import Settings
from ..training import PROGRAM


class CandidateConfig(Config):
    """Set by regression_sensor (from RMI_REGRESSION_*): weight the regressed slices up and train longer; set by
    `rmi generation` and generation_sensor: a new generation of another size, from scratch."""

    focus: list[str] = []  # slices like "add/5"
    focus_weight: float = 1.0
    steps_multiplier: float = 1.0
    size: str = ""  # a new generation: the recipe's size (or a model directory) trained from scratch; "": warm start
    taught: bool = True  # a new generation learns from the champion's labels and distributions (RMI_TEACH_*)


GENERATION, TEACHER, MODEL_SIZE = "generation", "teacher", "model_size"  # lineage tags of every model version
# lineage tags of one of several challengers: the Dagster run that trained them, and which of them it is ("2/4")
CHALLENGER_OF, CANDIDATE = "challenger_of", "candidate"


@dataclass(frozen=True)
class Shape:
    """What a model is trained as: its size, the model version it warm-starts from or the one that teaches it (never
    both), and its generation."""

    size: str
    warm_start: str | None = None
    teacher: str | None = None
    generation: int = 1


@op(ins={"after": In(Nothing)}, out=DynamicOut(dict))
def plan_challengers(context: OpExecutionContext, config: CandidateConfig, settings: ResourceParam[Settings],
                     storage: ObjectStore, registry: ModelRegistry):
    """One training per challenger (RMI_CHALLENGERS), each with its variation of RMI_CHALLENGER_GRID; several are
    grouped under one MLflow parent run."""
    champion = registry.version(CHAMPION)
    if config.size and champion is None:
        raise ValueError("a new generation learns from a champion: there is none yet (the first model is "
                         "RMI_TRAIN_MODEL_SIZE's)")
    from_version = champion.version if champion else 0
    seed = _turn_seed(settings, registry, champion)
    variations = settings.candidates.variations()
    parent = None
    if len(variations) > 1:
        version = storage.read_json(layout.DATASET_LATEST)["version"]
        parent = registry.open_run(f"challengers-{version}", {
            "dagster_run_id": context.run.run_id, "challengers": str(len(variations)),
            "champion_version": str(from_version), "grid": json.dumps(settings.candidates.challenger_grid)})
        context.log.info(f"{len(variations)} challengers, under MLflow run {parent}: "
                         + "; ".join(_described(v) for v in variations))
    for i, variation in enumerate(variations):
        shape, steps, max_seconds = _planned(config.size or variation.get("size", ""), bool(config.size),
                                             config.taught, settings, champion)
        yield DynamicOutput({
            "index": i, "of": len(variations), "variation": variation, "parent": parent, "shape": asdict(shape),
            "steps": int(steps * config.steps_multiplier), "max_seconds": max_seconds,
            "seed": seed + variation["seed"], "focus": list(config.focus), "focus_weight": config.focus_weight,
        }, mapping_key=f"candidate_{i + 1}_of_{len(variations)}")


def _planned(size: str, new_generation: bool, taught: bool, settings: Settings, champion) -> tuple[Shape, int, float]:
    """(what a candidate is trained as, steps, seconds): the first model (of `size`, else RMI_TRAIN_MODEL_SIZE's); a
    new generation from scratch, taught by the champion (asked for, or a size other than the champion's); else
    warm-started from the champion at its size."""
    rules = settings.training
    if champion is None:
        return Shape(size or rules.model_size), rules.bootstrap_steps, rules.bootstrap_max_seconds
    at = champion.tags.get(MODEL_SIZE, rules.model_size)
    generation = int(champion.tags.get(GENERATION, 1))
    if new_generation or (size and size != at):
        return (Shape(size, None, str(champion.version) if taught else None, generation + 1),
                settings.generations.steps, settings.generations.max_seconds)
    return Shape(at, str(champion.version), None, generation), rules.steps, rules.max_seconds


def _described(variation: dict) -> str:
    return ", ".join(f"{k} {json.dumps(v) if isinstance(v, dict) else v}" for k, v in variation.items())


@op(tags={"rmi/stage": "training"})
def train_challenger(context: OpExecutionContext, planned: dict, settings: ResourceParam[Settings],
                     storage: ObjectStore, registry: ModelRegistry,
                     training_launcher: ResourceParam[PipesClient]) -> Output:
    """One challenger trained through its own Pipes launch and registered; the only one of its cycle takes the alias
    `challenger` at once, one of several waits for challenger_selection."""
    alone = planned["of"] == 1
    tags = {} if alone else {CHALLENGER_OF: context.run.run_id, CANDIDATE: f"{planned['index'] + 1}/{planned['of']}",
                             "variation": _described(planned["variation"])}
    meta = train(context, settings, storage, registry, training_launcher, Shape(**planned["shape"]),
                 planned["steps"], planned["max_seconds"], planned["focus"], planned["focus_weight"],
                 alias=CHALLENGER if alone else None, tags=tags, seed=planned["seed"], parent=planned["parent"],
                 name=None if alone else f"candidate-{planned['index'] + 1}",
                 learning_rate=planned["variation"].get("learning_rate"), mix=planned["variation"].get("mix"))
    return Output({**meta, "variation": planned["variation"]})


@op(out=Out(Nothing))
def challengers_trained(context: OpExecutionContext, trained: list[dict], storage: ObjectStore,
                        registry: ModelRegistry) -> Output:
    """The cycle's challengers: one is the challenger already; several are written down for challenger_selection
    (layout.CHALLENGERS_LATEST) and their MLflow parent run is closed."""
    if len(trained) == 1:
        return Output(None, metadata={k: v for k, v in trained[0].items() if k != "variation"})
    trained = sorted(trained, key=lambda t: int(t["model_version"]))
    parent = trained[0]["mlflow_parent_run_id"]
    versions = [t["model_version"] for t in trained]
    storage.write_json(layout.CHALLENGERS_LATEST, {"dagster_run_id": context.run.run_id, "versions": versions,
                                                   "variations": [t["variation"] for t in trained],
                                                   "mlflow_parent_run_id": parent})
    registry.close_run(parent, tags={"model_versions": ",".join(versions)})
    return Output(None, metadata={
        "challengers": len(trained), "model_versions": ", ".join(f"v{v}" for v in versions),
        "mlflow_parent_run_id": parent, "dataset_version": trained[0]["dataset_version"],
        "dagster_run_id": context.run.run_id,
        "candidates": MetadataValue.md(_trained_table(trained)),
    })


def _trained_table(trained: list[dict]) -> str:
    lines = ["| version | variation | final loss | steps | parameters |", "|---|---|---|---|---|"]
    lines += [f"| v{t['model_version']} | {_described(t['variation'])} | {t['final_loss']} | {t['steps_done']} | "
              f"{t['parameters']} |" for t in trained]
    return "\n".join(lines)


@graph_asset(ins={"training_dataset": AssetIn(dagster_type=Nothing)}, group_name="training",
             kinds={"pytorch", "mlflow"}, config=ConfigMapping(
                 config_fn=lambda config: {"plan_challengers": {"config": config}},
                 config_schema=CandidateConfig.to_config_schema()),
             description=(
    "RMI_CHALLENGERS challengers (default one) trained with Lightning on the latest training dataset, warm-started "
    "from the champion (from scratch for the first model), each through its own Dagster Pipes launch, up to "
    "RMI_MAX_PARALLEL_TRAINING at a time; registered in MLflow as model versions (one alone: @challenger; several: "
    "under one parent run, until challenger_selection picks one), tagged with their dataset, feedback batches, "
    "Dagster run, code version, generation, teacher and size. A new generation (`rmi generation --size`) is "
    "trained from scratch at its size and taught by the champion."))
def candidate_model(training_dataset):
    return challengers_trained(plan_challengers(training_dataset).map(train_challenger).collect())


def train(context, settings: Settings, storage: ObjectStore, registry: ModelRegistry,
          launcher: PipesClient, shape: Shape, steps: int, max_seconds: float, focus: list[str] = (),
          focus_weight: float = 1.0, alias: str | None = CHALLENGER, tags: dict | None = None, seed: int | None = None,
          parent: str | None = None, name: str | None = None, learning_rate: float | None = None,
          mix: dict | None = None) -> dict:
    """Train one model through the training program and register it (at `alias`, None: no alias), with its
    lineage (under the MLflow run `parent`; `name` tells it from its siblings); `learning_rate` and `mix` (shares
    over the dataset's) change the settings' for it. Returns the materialization's metadata."""
    from ..ml.mix import weights

    version = storage.read_json(layout.DATASET_LATEST)["version"]
    manifest = storage.read_json(layout.dataset_manifest(version))
    if seed is None:
        seed = _turn_seed(settings, registry, registry.version(CHAMPION))
    mix_weights = manifest["weights"]
    if mix:
        absent = sorted(m for m, share in mix.items() if share > 0 and m not in manifest["by_source"])
        if absent:
            raise ValueError(f"a challenger's mix gives {absent} a share, but dataset {version} holds none of their "
                             "rows: give them a share in RMI_MIX so the dataset keeps them")
        mix_weights = weights(manifest["by_source"], {**manifest["mix"], **mix})
    learning_rate = learning_rate or settings.training.learning_rate
    run_id_dagster = context.run.run_id
    lineage = {
        "dataset_version": version,
        "dataset_uri": storage.uri(layout.dataset(version)),
        "feedback_batches": _joined(manifest["batches"]),
        "dagster_run_id": run_id_dagster,
        "code_version": code_version(),
        "recipe": settings.recipe,
        "warm_start_from": shape.warm_start or "scratch",
        GENERATION: str(shape.generation),
        TEACHER: shape.teacher or "none",
        MODEL_SIZE: shape.size,
        **(tags or {}),
    }
    checkpoint_key = layout.candidate_checkpoint(run_id_dagster + (f"-{name}" if name else ""))
    extras = {
        "recipe": settings.recipe,
        "dataset_version": version,
        "dataset_uri": storage.uri(layout.dataset_rows(version)),
        "mix_weights": mix_weights,  # a row's weight by its source
        "storage_options": {"endpoint_url": endpoint} if (endpoint := settings.storage.s3_endpoint_url) else {},
        "warm_start_uri": _warm_start(shape.warm_start, storage, registry) if shape.warm_start else None,
        "teach": _teaching(settings, storage, registry, shape.teacher) if shape.teacher else None,
        "checkpoint_uri": storage.uri(checkpoint_key),
        "model_size": shape.size,
        "steps": steps, "max_seconds": max_seconds, "seed": seed,
        "batch_size": settings.training.batch_size, "learning_rate": learning_rate,
        "focus": list(focus), "focus_weight": focus_weight,
        "hint_distillation": settings.practice.hint_distillation,
        "kto_beta": settings.training.kto_beta, "dpo_beta": settings.training.dpo_beta,
        "trainer": settings.training.hardware(),
    }
    with registry.run(f"{name or 'candidate'}-{version}", tags=lineage, parent=parent) as run_id:
        params = {"steps": steps, "batch_size": settings.training.batch_size, "learning_rate": learning_rate,
                  "max_seconds": max_seconds, "seed": seed, "focus": ",".join(focus) or "none"}
        if mix:
            params["mix"] = json.dumps(mix)
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
        context.log.info(f"taught by v{shape.teacher}: {reported['distillation']}; "
                         f"{reported['teacher_labels']} labels")
    return {
        "model_version": str(mv.version), "mlflow_run_id": run_id,
        **({"mlflow_parent_run_id": parent} if parent else {}), **lineage,
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()},
        "parameters": reported["parameters"],
        **{k: reported[k] for k in ("distillation", "teacher_labels") if k in reported},
        "stopped_by_time": reported["stopped_by_time"], "world_size": reported["world_size"],
        "checkpoint": storage.uri(checkpoint_key),
    }


def _turn_seed(settings: Settings, registry: ModelRegistry, champion) -> int:
    """The seed of this turn of the champion: a retry after a rejected candidate gets another one."""
    from ..ml.seeding import turn_seed

    from_version = champion.version if champion else 0
    return turn_seed(settings.seed, from_version, registry.candidates_since(from_version))


def _teaching(settings: Settings, storage: ObjectStore, registry: ModelRegistry, teacher: str) -> dict:
    """What the training program needs to be taught by `teacher`: its checkpoint, the slices it is reliable on and
    the others (from its latest sealed-eval scores per slice), and RMI_TEACH_*."""
    from ..ml.distill import reliable_slices

    suite = storage.read_json(layout.EVAL_MANIFEST)["refreshed_version"]
    saved = [key for key in storage.list(f"{layout.EVALUATIONS}/scores/")
             if key.rsplit("/", 1)[-1].startswith(f"v{teacher}-")]
    current = layout.slice_scores(teacher, suite)
    scores = storage.read_json(current if current in saved else saved[-1])["scores"] if saved else {}
    reliable = reliable_slices(scores, settings.saturation)
    return {"teacher_uri": _warm_start(teacher, storage, registry), "reliable": reliable,
            "unreliable": sorted(set(scores) - set(reliable)), **settings.teaching.model_dump()}


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
