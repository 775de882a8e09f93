"""judge_agreement: how far the judge that scores the evals can be trusted, measured on answers people rated.

The judge grades the latest answers users rated (their thumbs joined to the answer by its response, as the gateway
stores them), without a reference, as it grades any answer; a thumbs-up is a pass. Its true and false positive rates,
raw agreement and kappa, per slice, go to `judge/agreement.json`: candidate_evaluation corrects the judged pass rate
for those errors, and a judge that agrees with people below RMI_JUDGE_MIN_AGREEMENT blocks promotion there.
"""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    ResourceParam,
    asset,
)

from ..resources import layout
from ..resources.storage import ObjectStore
from ..resources.warehouse import Warehouse
from ..settings import Settings
from .evals import eval_scorer, keep_verdicts
from .feedback import feedback_events

RATED_ANSWERS = 400  # the latest rated answers the judge grades: enough for rates within about 0.05

AGREEMENT_CHECK = AssetCheckSpec(
    "judge_agrees_with_people", asset="judge_agreement",
    description="The judge agrees with people on at least RMI_JUDGE_MIN_AGREEMENT of the answers they rated (at "
                "least RMI_JUDGE_MIN_LABELS of them). Failing, it blocks promotion: a gate on a judge people "
                "disagree with would promote by the judge's taste.")


@asset(deps=[feedback_events], group_name="evaluation", kinds={"openai"}, check_specs=[AGREEMENT_CHECK])
def judge_agreement(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
                    eval_store: ObjectStore, warehouse: Warehouse) -> MaterializeResult:
    """The judge (RMI_EVAL_SCORER=judge) grades the latest answers users rated; its agreement with them per slice
    (true and false positive rates, kappa) and whether it may gate promotion. Nothing to do with another scorer."""
    from ..scoring.calibration import agreement, judge_verdict

    if settings.evals.scorer != "judge":
        if storage.exists(layout.JUDGE_AGREEMENT):  # a judge used before must not gate what it no longer scores
            storage.delete(layout.JUDGE_AGREEMENT)
        return MaterializeResult(metadata={"status": f"no judge in use (RMI_EVAL_SCORER={settings.evals.scorer})"},
                                 check_results=[AssetCheckResult(check_name=AGREEMENT_CHECK.name, passed=True,
                                                                 description="No judge scores the evals.")])
    rated = warehouse.query(
        "SELECT prompt, completion, rating = 'up' AS up, coalesce(skill, 'all') AS slice FROM feedback_events "
        "WHERE rating IS NOT NULL AND source = 'user' AND completion IS NOT NULL ORDER BY ts DESC, event_id LIMIT ?",
        [RATED_ANSWERS])
    scorer = eval_scorer(settings, eval_store)
    from ..scoring.contract import ScoreRequest

    try:
        judged = scorer.score_many([ScoreRequest(p, c) for p, c in zip(rated["prompt"], rated["completion"],
                                                                         strict=True)])
    finally:
        usage = keep_verdicts(eval_store, scorer)
    passes = [value >= 0.5 for value, _ in judged]
    by_slice = agreement(passes, rated["up"].to_list(), rated["slice"].to_list())
    overall = by_slice["all"]
    verdict = judge_verdict(overall, settings.judge.min_agreement, settings.judge.min_labels)
    storage.write_json(layout.JUDGE_AGREEMENT, {
        "judge": scorer.identity, "model": settings.judge.model, "rated_answers": len(rated),
        "verdict": {"status": verdict.status, "blocks": verdict.blocks, "sentence": verdict.sentence},
        "slices": {name: a.as_dict() for name, a in by_slice.items()}})
    context.log.info(verdict.sentence)
    rows = ["| slice | rated | agreement | kappa | true positive rate | false positive rate |",
            "|---|---|---|---|---|---|"]
    rows += [f"| {name} | {a.n} | {_pct(a.agreement)} | {_num(a.kappa)} | {_pct(a.tpr)} | {_pct(a.fpr)} |"
             for name, a in by_slice.items()]
    return MaterializeResult(metadata={
        "status": verdict.status, "sentence": verdict.sentence, "rated_answers": len(rated),
        "agreement": _round(overall.agreement), "kappa": _round(overall.kappa),
        "true_positive_rate": _round(overall.tpr), "false_positive_rate": _round(overall.fpr),
        "slices": MetadataValue.md("\n".join(rows)), **usage,
    }, check_results=[AssetCheckResult(
        check_name=AGREEMENT_CHECK.name, passed=not verdict.blocks, severity=AssetCheckSeverity.WARN,
        description=verdict.sentence[:1000],
        metadata={"status": verdict.status, "agreement": _round(overall.agreement), "rated_answers": overall.n})])


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
