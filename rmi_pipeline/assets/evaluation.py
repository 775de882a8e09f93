"""The challenger against the champion on every eval set, per slice, and the gate's verdict.

Counted slices (skill/tier) pool the anchor and the refreshed set; the mined hard cases and the slices too
small to be private are guarded against regression but do not make the gain (the champion once failed the
mined cases, so they would flatter any challenger). The public set and the anchor feed the leak signals.
The eval must stay harder than the model: a check warns when no counted slice is still under HEADROOM.
"""

import time

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    ResourceParam,
    asset,
)

from ..ml.curriculum import HEADROOM, HORIZON
from ..recipes.base import slice_name
from ..resources import layout
from ..resources.notifier import Notifier
from ..resources.registry import CHALLENGER, CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import Warehouse
from ..settings import Settings
from .evals import eval_suite, keep_verdicts
from .judging import judge_agreement
from .probes import REWARD_HACKING_CHECK, probe_challenger
from .sealed import answer_sealed
from .selection import SELECTED_FROM, SELECTION_SALT, SELECTION_SHARE, challenger_selection

HEADROOM_CHECK = AssetCheckSpec(
    "eval_headroom", asset="candidate_evaluation",
    description=f"Some counted slice is still under {HEADROOM:.0%} for the challenger, so the eval can measure the "
                "next gain. eval_suite grows the suite ahead of the champion (RMI_EVAL_LEAD tiers) and keeps a "
                f"horizon slice the champion answers under {HORIZON:.0%}; this fails when the challenger jumped past "
                "that in one cycle, or the recipe has no harder tier to make.")


GATE_CHECK = AssetCheckSpec(
    "gate", asset="candidate_evaluation",
    description="Green when the challenger is better than the champion by the paired-bootstrap gate (its gain's "
                "lower bound above RMI_GATE_MIN_GAIN, no slice significantly worse past RMI_GATE_SLICE_TOLERANCE, no "
                "leak signal); a warning when it is rejected. The champion stays where it was on a warning.")


@asset(deps=[challenger_selection, eval_suite, judge_agreement], group_name="evaluation", kinds={"pytorch"},
       check_specs=[GATE_CHECK, HEADROOM_CHECK, REWARD_HACKING_CHECK])
def candidate_evaluation(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
                         eval_store: ObjectStore, registry: ModelRegistry, warehouse: Warehouse,
                         notifier: Notifier) -> MaterializeResult:
    """The challenger and the champion answer every sealed eval item; the paired-bootstrap gate decides per slice
    whether the challenger is better, and the reward-hacking probes whether its gain is real. Writes the verdict
    (`evaluations/v<challenger>.json`) and tags the version. The best of several challengers is gated at the level
    divided by their number, or on the items that did not choose it (RMI_SELECTION_SHARE)."""
    from ..ml.gate import decide, markdown
    from ..ml.scored import top_tier
    from ..ml.selection import corrected
    from ..recipes.base import load_recipe

    recipe = load_recipe(settings.recipe)
    challenger = registry.version(CHALLENGER)
    if challenger is None:
        raise LookupError(f"model {registry.model_name!r} has no challenger to evaluate")
    champion = registry.version(CHAMPION)
    if champion is not None and champion.version == challenger.version:
        raise RuntimeError(f"v{challenger.version} is already the champion: train a new challenger first")
    versions = [mv for mv in (challenger, champion) if mv]
    # the best of several: judged on the items that did not choose it, or at the gate's level divided by how many
    chosen = int(challenger.tags.get(SELECTED_FROM, 1))
    split = SELECTION_SALT in challenger.tags
    part = (challenger.tags[SELECTION_SALT], float(challenger.tags[SELECTION_SHARE]), False) if split else None
    sealed = answer_sealed(settings, recipe, storage, eval_store, registry, versions, part)
    manifest, private, sets, scored, memos = sealed.manifest, sealed.private, sealed.sets, sealed.scored, sealed.memos
    judge_usage, scorer, slices = sealed.judge_usage, sealed.scorer, scored.slices()
    counted = {slice_name(s, t) for s, t in private}
    rules = settings.gate if split else corrected(settings.gate, chosen)
    decision = decide(slices, counted, rules, leak_pairs=scored.leak_pairs(private) if champion else {},
                      seed=settings.seed + int(challenger.version))
    judged = judge_report(storage, settings, scored, private, decision) if settings.evals.scorer == "judge" else {}
    started = time.perf_counter()
    try:
        findings, probed = probe_challenger(context, settings, recipe, [memo.model for memo in memos],
                                            (challenger, champion), sets, manifest, private, scorer,
                                            (storage, eval_store), registry, warehouse, notifier, decision.promote)
    finally:
        judge_usage = keep_verdicts(eval_store, scorer) or judge_usage
    probe_seconds = time.perf_counter() - started
    fired = [f.probe for f in findings if f.fired]
    if fired and settings.probes.block and decision.promote:
        decision.promote = False
        decision.reason = f"Held back: suspected reward hacking ({', '.join(fired)}). The gate alone: {decision.reason}"
    if chosen > 1:
        decision.reason += (f" Judged on the {len(sealed.scored.tasks)} sealed items that did not choose it among "
                            f"{chosen} challengers." if split else f" Chosen among {chosen} challengers on these "
                            f"items: judged at the gate's one-sided level divided by {chosen}.")
    verdict = "promote" if decision.promote else "reject"
    context.log.info(f"challenger v{challenger.version}: {verdict}. {decision.reason}")

    # The anchor is frozen: its means are comparable across every cycle (the learning curve), beside the highest
    # tier each model solves, which the grown tiers let climb past the anchor's.
    scores: dict[str, float] = {}
    skills = sorted({s for s, _ in private})  # an eval file's slices, or the recipe's skills
    tiered = all(t is not None for _, t in private)
    for model, who in enumerate(["challenger", "champion"][:len(versions)]):
        scores[f"{who}_anchor_mean"] = scored.anchor_mean(model, private)
        scores |= {f"{who}_skill_{s}": scored.anchor_mean(model, private, s) for s in skills}
        if tiered:
            scores |= {f"{who}_top_tier_{s}": top_tier(slices, s, model, settings.saturation) for s in skills}
    report = {"challenger_version": challenger.version, "champion_version": champion.version if champion else None,
              "suite_version": manifest["version"], "grown_version": manifest.get("grown_version"),
              "refreshed_version": manifest["refreshed_version"],
              "scores": scores, "decision": decision.as_dict(), "judge": judged,
              "probes": {"fired": fired, "ran": [f.probe for f in findings]}}
    storage.write_json(layout.evaluation(challenger.version), report)
    registry.tag(challenger.version, {"eval_anchor_mean": f"{scores['challenger_anchor_mean']:.4f}",
                                      "gate_verdict": verdict, "gate_reason": decision.reason[:4000]})
    # with a champion the interval is the gain's; for a first model, its score's
    of = "gain" if champion else "score"
    interval = {f"{of}_low": round(decision.gain_low, 4), f"{of}_high": round(decision.gain_high, 4)}
    if champion:
        interval["gain"] = round(decision.gain, 4)
    registry.log_evaluation(challenger.version, {
        **{f"eval_{k.removeprefix('challenger_')}": v for k, v in scores.items() if k.startswith("challenger_")},
        **{k: v for k, v in scores.items() if k.startswith("champion_")},
        **{f"gate_{k}": v for k, v in interval.items()}, "gate_promote": float(decision.promote),
        **{f"eval_slice/{s.name}": s.challenger for s in decision.slices}},
        f"{verdict} against champion v{champion.version if champion else 'none'}. {decision.reason}")
    # what this evaluation means downstream is who is champion: a rejection leaves the same data version as the
    # evaluation that promoted the champion, so the UI does not call `champion` stale (Unsynced) after it
    after = challenger.version if decision.promote else (champion.version if champion else "none")
    return MaterializeResult(data_version=DataVersion(f"champion v{after}"), metadata={
        "verdict": verdict,
        "reason": decision.reason,
        "probes_fired": ", ".join(fired) or "none",
        "challenger_version": str(challenger.version),
        "champion_version": str(champion.version) if champion else "none",
        **{k: round(v, 4) for k, v in scores.items()},
        **interval,
        **{f"leak_{k}": round(v, 4) for k, v in decision.leaks.items()},
        "eval_items": {k: len(v) for k, v in sets.items()},
        "gated_items": len(sealed.scored.tasks),  # every item, or the confirmation part after a selection
        "eval_compute_seconds": round(sealed.seconds, 3), "probe_seconds": round(probe_seconds, 3),
        **judge_usage, **judged,
        # the champion answered most of the suite before (the cycle before, as the challenger): not decoded again
        "items_decoded": dict(zip(("challenger", "champion"), (memo.decoded for memo in memos), strict=False)),
        "verdict_table": MetadataValue.md(markdown(decision)),
        "slices": slice_table(decision),
        **{f"score {s.name}": round(s.challenger, 4) for s in decision.slices if s.counted},  # one plot per slice
    }, check_results=[gate(decision, interval), headroom(slices, counted), probed])


def judge_report(storage: ObjectStore, settings: Settings, scored, private: set, decision) -> dict:
    """The judged pass rates on the counted part of the eval file corrected for the judge's measured errors (each
    with its interval), and the judge's verdict: one that people disagree with blocks promotion, saying so."""
    from ..scoring.calibration import Agreement, corrected_pass_rate

    if not storage.exists(layout.JUDGE_AGREEMENT):
        return {"judge_status": "unmeasured", "judge_sentence": "The judge's agreement with people is not measured "
                "yet (judge_agreement has not run): its pass rates are shown uncorrected."}
    measured = storage.read_json(layout.JUDGE_AGREEMENT)
    overall = Agreement(**measured["slices"]["all"])
    report = {"judge_status": measured["verdict"]["status"], "judge_sentence": measured["verdict"]["sentence"]}
    counted = [i for i, (name, task) in enumerate(scored.tasks) if name == "anchor" and (task.skill, task.tier)
               in private]
    for model, who in enumerate(["challenger", "champion"][:len(scored.right)]):
        passes = int((scored.right[model][counted] >= 0.5).sum())
        corrected = corrected_pass_rate(passes, len(counted), overall.tpr_counts, overall.fpr_counts)
        report[f"{who}_judged_pass_rate"] = round(passes / max(1, len(counted)), 4)
        report |= {f"{who}_corrected_pass_rate": corrected.estimate, f"{who}_corrected_low": round(corrected.low, 4),
                   f"{who}_corrected_high": round(corrected.high, 4), f"{who}_corrected": corrected.sentence}
    if measured["verdict"]["blocks"] and decision.promote:
        decision.promote = False
        decision.reason = f"Blocked by the judge: {measured['verdict']['sentence']} (the gate alone: {decision.reason})"
    return report


def gate(decision, interval: dict) -> AssetCheckResult:
    """The verdict as a check the UI colours: passed when the gate promotes."""
    regressed = [s.name for s in decision.slices if s.regressed]
    return AssetCheckResult(check_name="gate", passed=decision.promote, severity=AssetCheckSeverity.WARN,
                            description=decision.reason[:1000],
                            metadata={"reason": decision.reason, **interval,
                                      "regressed_slices": ", ".join(regressed) or "none"})


def slice_table(decision) -> MetadataValue:
    """Every slice as a sortable table: scores, the paired delta and its interval, the sign test's p-value that the
    challenger is worse, whether it counts."""
    from dagster import TableColumn, TableRecord, TableSchema

    columns = [("slice", "string"), ("items", "int"), ("counted", "bool"), ("challenger", "float"),
               ("champion", "float"), ("delta", "float"), ("low", "float"), ("high", "float"), ("p_worse", "float"),
               ("regressed", "bool")]
    records = [TableRecord({"slice": s.name, "items": s.items, "counted": s.counted,
                            **{k: None if getattr(s, k) is None else round(getattr(s, k), 4)
                               for k in ("challenger", "champion", "delta", "low", "high")},
                            "p_worse": None if s.p_worse is None else float(f"{s.p_worse:.2g}"),
                            "regressed": s.regressed}) for s in decision.slices]
    return MetadataValue.table(records, schema=TableSchema([TableColumn(n, t) for n, t in columns]))


def headroom(slices: dict, counted: set[str]) -> AssetCheckResult:
    """Whether the challenger still scores under HEADROOM on some counted slice, and on which it does worst."""
    scores = {name: float(slices[name].challenger.mean()) for name in sorted(counted)}
    hardest = min(scores, key=scores.get)
    return AssetCheckResult(
        check_name="eval_headroom", passed=scores[hardest] < HEADROOM, severity=AssetCheckSeverity.WARN,
        metadata={"hardest_slice": hardest, "hardest_slice_score": round(scores[hardest], 4),
                  "slices_under_headroom": sum(v < HEADROOM for v in scores.values())})
