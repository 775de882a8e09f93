"""The challenger against the champion on the private eval suite, per skill and tier, and the gate's verdict."""


import time

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from .. import layout
from ..resources.registry import CHALLENGER, CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..settings import Settings
from .evals import eval_suite, load_suite
from .training import candidate_model


@asset(deps=[candidate_model, eval_suite], group_name="evaluation", kinds={"pytorch"})
def candidate_evaluation(
    context: AssetExecutionContext, storage: ObjectStore, registry: ModelRegistry
) -> MaterializeResult:
    from ..ml.gate import decide
    from ..recipes.base import Task, load_recipe

    settings = Settings()
    recipe = load_recipe(settings.recipe)
    suite = load_suite(storage)
    tasks = [Task(i["prompt"], i["answer"], i["skill"], int(i["tier"])) for i in suite["items"]]
    manifest = storage.read_json(layout.EVAL_MANIFEST)
    private = {(s["skill"], s["tier"]) for s in manifest["slices"] if s["private"]}

    challenger = registry.version(CHALLENGER)
    if challenger is None:
        raise LookupError(f"model {registry.model_name!r} has no challenger to evaluate")
    champion = registry.version(CHAMPION)
    models = [registry.load(mv.version, recipe) for mv in (challenger, champion) if mv]
    started = time.perf_counter()
    new = recipe.exact_match(models[0], tasks)
    old = recipe.exact_match(models[1], tasks) if champion else None
    compute_seconds = time.perf_counter() - started
    decision = decide(new, old, private, min_gain=settings.gate_min_gain,
                      slice_tolerance=settings.gate_slice_tolerance, first_floor=settings.gate_first_floor)
    verdict = "promote" if decision.promote else "reject"
    context.log.info(f"challenger v{challenger.version}: {verdict}: {decision.reason}")

    report = {
        "challenger_version": challenger.version,
        "champion_version": champion.version if champion else None,
        "suite_version": manifest["version"],
        "decision": decision.as_dict(),
        "slices": [{"skill": s, "tier": t, "private": (s, t) in private, "challenger": new[(s, t)],
                    "champion": old[(s, t)] if old else None} for s, t in new],
    }
    storage.write_json(f"{layout.EVALUATIONS}/v{challenger.version}.json", report)
    registry.tag(challenger.version, {"eval_private_mean": f"{decision.challenger_mean:.4f}",
                                      "gate_verdict": verdict, "gate_reason": decision.reason[:4000]})
    per_skill = {f"challenger_skill_{skill}": round(_skill_mean(new, private, skill), 4) for skill in recipe.skills}
    if old:
        per_skill |= {f"champion_skill_{skill}": round(_skill_mean(old, private, skill), 4) for skill in recipe.skills}
    return MaterializeResult(metadata={
        "verdict": verdict,
        "reason": decision.reason,
        "challenger_version": challenger.version,
        "champion_version": champion.version if champion else "none",
        "challenger_private_mean": round(decision.challenger_mean, 4),
        "champion_private_mean": round(decision.champion_mean, 4) if old else None,
        **per_skill,
        "eval_compute_seconds": round(compute_seconds, 3),
        "slices": MetadataValue.md(_table(report["slices"])),
    })


def _skill_mean(scores: dict, private: set, skill: str) -> float:
    values = [v for (s, t), v in scores.items() if s == skill and (s, t) in private]
    return sum(values) / max(1, len(values))


def _table(slices: list[dict]) -> str:
    lines = ["| skill | tier | private | challenger | champion | delta |", "|---|---|---|---|---|---|"]
    for s in slices:
        champ = "" if s["champion"] is None else f"{s['champion']:.2f}"
        delta = "" if s["champion"] is None else f"{s['challenger'] - s['champion']:+.2f}"
        lines.append(f"| {s['skill']} | {s['tier']} | {'yes' if s['private'] else 'no'} | "
                     f"{s['challenger']:.2f} | {champ} | {delta} |")
    return "\n".join(lines)
