"""The best of a cycle's challengers, chosen without optimism.

Picking the best of K on the items that then gate it would promote lucky noise: of K equal candidates the luckiest
looks better than it is. So either the gate's level is divided by K for the winner (the default), or each slice's
items are split by a hash salted with the cycle, RMI_SELECTION_SHARE of them choose and the gate judges the winner on
the rest only (ml/selection.py). The winner takes the alias `challenger`; the others are tagged and never take it.
"""

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, ResourceParam, asset

from ..resources import layout
from ..resources.registry import CHALLENGER, ModelRegistry
from ..resources.storage import ObjectStore
from ..settings import Settings
from .evals import eval_suite
from .training import candidate_model

# tags of a version chosen among several: how many, and the split that chose it (none: every item chose it, and
# the gate's level is divided by how many)
SELECTED_FROM, SELECTION_SALT, SELECTION_SHARE = "selected_from", "selection_salt", "selection_share"


@asset(deps=[candidate_model, eval_suite], group_name="evaluation", kinds={"pytorch", "mlflow"})
def challenger_selection(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
                         eval_store: ObjectStore, registry: ModelRegistry) -> MaterializeResult:
    """With several challengers (RMI_CHALLENGERS): each answers the sealed eval (every item, or the selection part:
    RMI_SELECTION_SHARE of every slice, by a hash salted with the cycle), the best mean over the counted slices takes
    the alias `challenger`, and the others are tagged as having lost; candidate_evaluation then gates the winner at
    its level divided by their number, or on the other part only. One challenger: nothing to choose."""
    from ..ml.scored import Scored, eval_tasks
    from ..ml.selection import select
    from ..recipes.base import load_recipe, slice_name
    from .sealed import answer_sealed

    challenger = registry.version(CHALLENGER)
    trained = storage.read_json(layout.CHALLENGERS_LATEST) if storage.exists(layout.CHALLENGERS_LATEST) else None
    if trained is None or (challenger is not None and
                           int(challenger.version) > max(int(v) for v in trained["versions"])):
        if challenger is None:
            raise LookupError(f"model {registry.model_name!r} has no challenger: materialize candidate_model first")
        return MaterializeResult(metadata={
            "challengers": 1, "winner": f"v{challenger.version}",
            "reason": f"One challenger, v{challenger.version}: nothing to choose; the gate judges it on every sealed "
                      "item."})
    rules = settings.candidates
    salt, share = trained["dagster_run_id"], rules.selection_share
    client = registry.client()
    versions = [client.get_model_version(registry.model_name, v) for v in trained["versions"]]
    recipe = load_recipe(settings.recipe)
    sealed = answer_sealed(settings, recipe, storage, eval_store, registry, versions,
                           (salt, share, True) if share else None)
    counted = {slice_name(s, t) for s, t in sealed.private}
    scores = [{name: pair.challenger for name, pair in Scored(sealed.scored.tasks, [right]).slices().items()}
              for right in sealed.scored.right]
    chosen = select(scores, [str(mv.version) for mv in versions], counted, settings.gate.confidence,
                    settings.gate.resamples, seed=settings.seed + int(versions[0].version))
    winner = versions[chosen.winner]
    # the sets hold every item; the answered ones are the selection part: the rest confirm
    confirming = len(eval_tasks(sealed.sets)) - len(sealed.scored.tasks)
    chosen.reason += (f" The gate judges it on the {confirming} items that did not choose it."
                      if share else f" The gate judges it at its one-sided level divided by {len(versions)}.")
    for candidate, mv in zip(chosen.candidates, versions, strict=True):
        registry.log_evaluation(mv.version, {"selection_score": candidate.score})  # compared in MLflow's UI
        if mv is not winner:
            registry.tag(mv.version, {"selection": f"lost to v{winner.version}",
                                      "selection_score": f"{candidate.score:.4f}"})
    registry.point(CHALLENGER, winner.version, {
        "selection": "won", "selection_score": f"{chosen.candidates[chosen.winner].score:.4f}",
        SELECTED_FROM: str(len(versions)), **({SELECTION_SALT: salt, SELECTION_SHARE: str(share)} if share else {})})
    registry.close_run(trained["mlflow_parent_run_id"], tags={"winner": f"v{winner.version}",
                                                              "selection_reason": chosen.reason[:4000]})
    context.log.info(chosen.reason)
    storage.write_json(layout.SELECTION_LATEST, {**chosen.as_dict(), "dagster_run_id": salt,
                                                 "winner": str(winner.version)})
    return MaterializeResult(metadata={
        "challengers": len(versions), "winner": f"v{winner.version}", "reason": chosen.reason,
        "spread": round(chosen.spread, 4), "selection_items": len(sealed.scored.tasks),
        "mlflow_parent_run_id": trained["mlflow_parent_run_id"],
        "candidates": MetadataValue.md(table(chosen, versions)),
        **{f"score v{c.version}": round(c.score, 4) for c in chosen.candidates},
    })


def table(chosen, versions: list) -> str:
    """Every candidate with what it varied and its score on the selection part, the winner first."""
    lines = [chosen.reason, "", "| candidate | variation | selection score | interval | |", "|---|---|---|---|---|"]
    order = sorted(range(len(versions)), key=lambda i: (i != chosen.winner, -chosen.candidates[i].score))
    for i in order:
        c, mv = chosen.candidates[i], versions[i]
        lines.append(f"| v{c.version} | {mv.tags.get('variation', '-')} | {c.score:.3f} | {c.low:.3f} to "
                     f"{c.high:.3f} | {'winner' if i == chosen.winner else ''} |")
    return "\n".join(lines)


def choice_of(storage: ObjectStore, version) -> str | None:
    """Why `version` won the selection among several challengers, as `rmi status` and `/rmi status` say it; None
    for a challenger that was alone."""
    if not storage.exists(layout.SELECTION_LATEST):
        return None
    chosen = storage.read_json(layout.SELECTION_LATEST)
    return chosen["reason"] if chosen["winner"] == str(version) else None
