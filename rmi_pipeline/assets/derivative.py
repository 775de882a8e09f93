"""The derivative for serving: a smaller student distilled from the champion (fast_candidate), which takes the alias
`fast` when it keeps the champion's quality and answers faster (fast_model): RMI_DERIVATIVE_*.

It learns from scratch on the latest training dataset and the champion's teaching (ml/distill.py), is judged by a
non-inferiority gate and a timed speed-up (ml/derivative.py), and with a gateway serving `fast` is trialled on its
users as a canary first, like any model (assets/canary.py). The champion alias never moves here.
"""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    Config,
    MaterializeResult,
    MetadataValue,
    PipesClient,
    ResourceParam,
    asset,
)

from ..resources import layout
from ..resources.notifier import Notifier
from ..resources.registry import CHAMPION, FAST, ModelRegistry
from ..resources.storage import ObjectStore
from ..settings import Settings
from .dataset import training_dataset
from .evals import eval_suite
from .training import GENERATION, Shape, train

DERIVATIVE_OF = "derivative_of"  # model version tag: the champion a derivative was distilled from
SPEED_PROMPTS = 1000  # counted eval prompts the speed is timed on


class DerivativeConfig(Config):
    """Set by `rmi derivative` (and derivative_sensor from RMI_DERIVATIVE_SIZE)."""

    size: str = ""  # the recipe's size; "": RMI_DERIVATIVE_SIZE
    taught: bool = True  # distilled from the champion; false: trained on the rows alone (a baseline)


@asset(deps=[training_dataset], group_name="derivative", kinds={"pytorch", "mlflow"})
def fast_candidate(context: AssetExecutionContext, config: DerivativeConfig, settings: ResourceParam[Settings],
                   storage: ObjectStore, registry: ModelRegistry,
                   training_launcher: ResourceParam[PipesClient]) -> MaterializeResult:
    """A smaller student of RMI_DERIVATIVE_SIZE trained from scratch on the latest training dataset, taught by the
    champion (its labels and next-token distributions, RMI_TEACH_*), through the same training program as any
    candidate; registered as a model version tagged derivative_of, with no alias until fast_model keeps it."""
    size = config.size or settings.derivative.size
    if not size:
        raise ValueError("no derivative size: set RMI_DERIVATIVE_SIZE or run `rmi derivative --size NAME`")
    champion = registry.version(CHAMPION)
    if champion is None:
        raise LookupError("a derivative is distilled from the champion: there is none yet")
    shape = Shape(size, teacher=str(champion.version) if config.taught else None,
                  generation=int(champion.tags.get(GENERATION, 1)))
    result = train(context, settings, storage, registry, training_launcher, shape, settings.derivative.steps,
                   settings.derivative.max_seconds, alias=None, tags={DERIVATIVE_OF: str(champion.version)})
    storage.write_json(layout.DERIVATIVE_LATEST, {"version": result["model_version"],
                                                  "champion": str(champion.version)})
    return MaterializeResult(metadata=result)


DERIVATIVE_GATE = AssetCheckSpec(
    "derivative_gate", asset="fast_model",
    description="Green when the latest derivative keeps the champion's quality (no counted slice under 1 - "
                "RMI_DERIVATIVE_TOLERANCE of its score, the overall interval within it) and answers "
                "RMI_DERIVATIVE_MIN_SPEEDUP times as many prompts per second; a warning when it does not, and `fast` "
                "stays where it was.")


@asset(deps=[fast_candidate, eval_suite], group_name="derivative", kinds={"pytorch", "mlflow"},
       check_specs=[DERIVATIVE_GATE])
def fast_model(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
               eval_store: ObjectStore, registry: ModelRegistry, notifier: Notifier) -> MaterializeResult:
    """The latest derivative against the champion that taught it on the sealed eval, and both timed answering the
    same prompts in this process. Kept: the alias `fast` moves to it (with a gateway serving `fast`, it becomes
    that gateway's canary first); else nothing moves. `rmi serve` answers with it under RMI_SERVE_MODEL=fast."""
    from ..ml.derivative import answers_per_second, judge, markdown
    from ..recipes.base import load_recipe, slice_name
    from .promotion import promotion_mode, trial_tags
    from .sealed import answer_sealed

    if not storage.exists(layout.DERIVATIVE_LATEST):
        raise FileNotFoundError("no derivative has been trained yet: materialize fast_candidate (`rmi derivative`)")
    latest = storage.read_json(layout.DERIVATIVE_LATEST)
    champion = registry.version(CHAMPION)
    student = registry.client().get_model_version(registry.model_name, latest["version"])
    if champion is None or str(champion.version) != latest["champion"]:
        raise RuntimeError(f"derivative v{latest['version']} was taught by v{latest['champion']}, and the champion "
                           f"is now v{champion.version if champion else 'none'}: train a derivative of it first")
    recipe = load_recipe(settings.recipe)
    sealed = answer_sealed(settings, recipe, storage, eval_store, registry, [student, champion])
    counted = {slice_name(s, t) for s, t in sealed.private}
    prompts = [t.prompt for name, t in sealed.scored.tasks if name == "anchor" and t.slice in counted][:SPEED_PROMPTS]
    speeds = answers_per_second(recipe, [memo.model for memo in sealed.memos], prompts, settings.serving.threads)
    verdict = judge(sealed.scored.slices(), counted, settings.derivative.tolerance, speeds,
                    settings.derivative.min_speedup, settings.gate.confidence, settings.gate.resamples,
                    seed=settings.seed + int(student.version))
    context.log.info(f"derivative v{student.version}: {verdict.reason}")
    storage.write_json(layout.evaluation(student.version), {"derivative_version": str(student.version),
                                                             "champion_version": str(champion.version),
                                                             **verdict.as_dict()})
    tags = {"derivative_verdict": "kept" if verdict.passed else "not kept", "derivative_reason": verdict.reason[:4000],
            "speedup": f"{verdict.speedup:.2f}"}
    moved = "nothing"
    if verdict.passed and promotion_mode(settings, storage, context, alias=FAST) == "canary":
        registry.start_canary(student.version, {**tags, **trial_tags(context, settings)}, for_alias=FAST)
        moved = f"canary for {FAST}"
    elif verdict.passed:
        previous = registry.point(FAST, student.version, tags)
        moved = f"{FAST}: {f'v{previous}' if previous else 'none'} -> v{student.version}"
        notifier.notify("promotion", f"{FAST} -> v{student.version}, distilled from champion v{champion.version}. "
                        f"{verdict.reason}", key=f"fast-{student.version}", run_id=context.run.run_id)
    else:
        registry.tag(student.version, tags)
    return MaterializeResult(metadata={
        "verdict": tags["derivative_verdict"], "reason": verdict.reason, "moved": moved,
        "derivative_version": str(student.version), "champion_version": str(champion.version),
        "speedup": round(verdict.speedup, 3), "derivative_per_second": round(verdict.student_per_second, 1),
        "champion_per_second": round(verdict.champion_per_second, 1),
        "derivative_mean": round(verdict.student_mean, 4), "champion_mean": round(verdict.champion_mean, 4),
        "delta_low": round(verdict.low, 4), "delta_high": round(verdict.high, 4),
        "verdict_table": MetadataValue.md(markdown(verdict)),
    }, check_results=[AssetCheckResult(check_name="derivative_gate", passed=verdict.passed,
                                       severity=AssetCheckSeverity.WARN, description=verdict.reason[:1000],
                                       metadata={"speedup": round(verdict.speedup, 3)})])
