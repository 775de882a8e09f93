"""champion_health: is the model in production still as good as when it was promoted?

Two signals per slice: the champion's score (RMI_EVAL_SCORER) on the current eval suite (anchor and this cycle's
refreshed set pooled, and the mined hard cases), and the live thumbs-down rate of its latest rated answers in the
warehouse. A model answers the same items the same way, so its scores on a suite are computed once (by its evaluation,
or by the first check on that suite) and later checks reuse them until eval_suite draws a new suite: a check after an
ingest or on the hourly schedule then loads no model and decodes nothing. The first check of a champion records its
baseline; later checks flag a slice whose score falls, or whose thumbs-down rate rises, past RMI_HEALTH_TOLERANCE.
regression_sensor acts on the verdict. The mined hard cases are shown, not judged: they are the champion's own
failures that users corrected, so its score on them falls each time new ones are mined, with nothing wrong.

The live baseline is what users had just before the champion started serving: the rates of the latest answers of
the models before it (for the very first champion, its own first rated answers). A slice without a baseline rate
of its own is held to the rate users had then over all slices. So when users move to a kind of question the
champion barely knows, what they experience regressed, and the check says so, though the model did not change;
and a drift that begins just as a new champion starts serving is caught the same way.

A new champion whose live thumbs-down on a slice rises significantly over its predecessor's (the same two-sided
interval at the gate's confidence as the canary's verdict, past RMI_CANARY_TOLERANCE; slices the predecessor was
rated on) is rolled back to it through the audited rollback path, and a person is alerted once
(RMI_HEALTH_AUTO_ROLLBACK).
"""

from datetime import UTC, datetime

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

from ..recipes.base import slice_name
from ..resources import layout
from ..resources.notifier import Notifier
from ..resources.registry import CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import WHOLE_ANSWER, Warehouse
from ..settings import Settings
from .evals import eval_scorer, eval_suite, keep_verdicts, load_sets, remember, remembered, save_slice_scores

MIN_RATED = 30  # fewer rated answers on a slice say nothing about its rate


HEALTH_CHECK = AssetCheckSpec(
    "champion_holds_up", asset="champion_health",
    description="No slice of the champion fell past RMI_HEALTH_TOLERANCE against its baseline, on the eval or in "
                "users' thumbs-down, and it was not rolled back; a warning names the slices (regression_sensor aims "
                "a cycle at them).")


@asset(deps=[eval_suite], group_name="health", kinds={"pytorch", "duckdb"}, check_specs=[HEALTH_CHECK])
def champion_health(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
                    eval_store: ObjectStore, registry: ModelRegistry, warehouse: Warehouse,
                    notifier: Notifier) -> MaterializeResult:
    """The champion on the current eval suite and its live thumbs-down rates per slice, against its baseline (its
    first check): `regressed` and the slices that fell, which regression_sensor acts on. Runs hourly, after every
    ingest and after every cycle."""
    import numpy as np

    from ..ml.scored import MINED, Scored, eval_tasks
    from ..recipes.base import load_recipe

    champion = registry.version(CHAMPION)
    if champion is None:
        return MaterializeResult(metadata={"regressed": False, "status": "no champion yet"}, check_results=[
            AssetCheckResult(check_name=HEALTH_CHECK.name, passed=True, description="No champion yet.")])
    recipe = load_recipe(settings.recipe)
    manifest = storage.read_json(layout.EVAL_MANIFEST)
    cached = layout.slice_scores(str(champion.version), manifest["refreshed_version"])
    if storage.exists(cached):  # it answered this suite in its evaluation or a check before: the same answers
        scores = dict(sorted(storage.read_json(cached)["scores"].items()))
        scored = f"reused: scored once on suite {manifest['refreshed_version']}"
    else:
        tasks = eval_tasks(load_sets(eval_store, manifest))
        scorer = eval_scorer(settings, eval_store)
        memo = remembered(recipe, registry, eval_store, champion, scorer)
        try:
            right = memo.scores([t for _, t in tasks])
        finally:
            keep_verdicts(eval_store, scorer)
        remember(eval_store, registry, champion, memo, only_asked=True)
        scores = {name: float(pair.challenger.mean())
                  for name, pair in sorted(Scored(tasks, [np.array(right, dtype=float)]).slices().items())}
        save_slice_scores(storage, champion.version, manifest, scores)
        scored = f"answered {len(tasks):,} items"

    window = settings.health.window_events
    tiered = recipe.has("generator")
    down, down_all, rated = live_rates(warehouse, str(champion.version), window, tiered=tiered)

    key = layout.health_baseline(champion.version)
    if not storage.exists(key):  # the champion's first check is its baseline
        before, before_all, before_rated = live_rates(warehouse, str(champion.version), window, others=True,
                                                      tiered=tiered)
        storage.write_json(key, {"scores": scores, "down": before, "down_all": before_all, "rated": before_rated})
    baseline = storage.read_json(key)
    if not baseline["down"] and down:  # the first champion: its first rated answers
        baseline |= {"down": down, "down_all": down_all}
        storage.write_json(key, baseline)
    # a slice without a baseline rate is held to the rate users had over all slices then
    held_to = {s: baseline["down"].get(s, baseline.get("down_all")) for s in down}
    new_slices = sorted(s for s in down if s not in baseline["down"] and baseline["down"])
    tol = settings.health.tolerance
    judged = {s for s in scores if s in baseline["scores"] and not s.startswith(slice_name(MINED, ""))}
    regressed = sorted({s for s in judged if scores[s] < baseline["scores"][s] - tol}
                       | {s for s, v in down.items() if held_to[s] is not None and v > held_to[s] + tol})
    lines = ["| slice | eval | baseline | thumbs-down | baseline |", "|---|---|---|---|---|"]
    for name in sorted(set(scores) | set(down)):
        cells = [scores.get(name), baseline["scores"].get(name), down.get(name), held_to.get(name)]
        lines.append(f"| {name}{' (regressed)' if name in regressed else ''}{' (new)' if name in new_slices else ''}"
                     " | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
    rolled_back = _roll_back_if_worse(context, settings, registry, notifier, str(champion.version), rated,
                                      baseline.get("rated") or {})
    if regressed and not rolled_back:
        context.log.warning(f"champion v{champion.version} regressed on {', '.join(regressed)}")
    return MaterializeResult(metadata={
        # a champion rolled back is no longer the one to fix: its successor, back in place, gets its own check
        "regressed": bool(regressed) and not rolled_back,
        "rolled_back": rolled_back or "no",
        "regressed_slices": MetadataValue.json(regressed),
        "champion_version": str(champion.version),
        "eval_scores": scored,
        "new_slices": ", ".join(new_slices) or "none",
        "eval_mean": sum(scores.values()) / len(scores),
        **({"live_thumbs_down": down_all} if down_all is not None else {}),
        **({"baseline_thumbs_down": baseline["down_all"]} if baseline.get("down_all") is not None else {}),
        **{f"eval {k}": round(v, 4) for k, v in scores.items()},
        **{f"thumbs_down {k}": round(v, 4) for k, v in down.items()},
        "slices": MetadataValue.md("\n".join(lines)),
    }, check_results=[AssetCheckResult(
        check_name=HEALTH_CHECK.name, passed=not regressed and not rolled_back, severity=AssetCheckSeverity.WARN,
        description=(f"Rolled back: {rolled_back}" if rolled_back else
                     f"v{champion.version} regressed on {', '.join(regressed)}" if regressed else
                     f"v{champion.version} holds up on every slice"),
        metadata={"regressed_slices": ", ".join(regressed) or "none", "champion_version": str(champion.version)})])


def _roll_back_if_worse(context, settings: Settings, registry: ModelRegistry, notifier: Notifier, version: str,
                        rated: dict, before: dict) -> str | None:
    """When users are significantly worse off with the champion than with the models before it, on a slice both
    were rated on, its predecessor returns through the audited rollback path; returns the verdict, or None.
    Slices the predecessor was never rated on (users drifting to new questions) cannot say the release is worse."""
    from ..ml.canary import Period, compare_all
    from .promotion import champion_moved

    history = registry.champion_history()
    if not settings.health.auto_rollback or len(history) < 2 or history[-1] != version:
        return None
    periods = {s: [Period(*rated[s], *before[s])] for s in sorted(set(rated) & set(before))}
    worse = [s for s in compare_all(periods, settings.gate.confidence, settings.canary.tolerance) if s.worse]
    if not worse:
        return None
    w = max(worse, key=lambda s: s.low)
    reason = (f"live thumbs-down of v{version} on {', '.join(s.name for s in worse)} rose significantly over its "
              f"predecessor's: {w.name} {w.canary_down:.3f} against {w.champion_down:.3f} ({w.delta:+.3f}, "
              f"{settings.gate.confidence:.0%} interval {w.low:+.3f} to {w.high:+.3f})")
    before_v, after_v = registry.rollback({"override_action": "rollback", "override_by": "champion_health",
                                           "override_at": datetime.now(UTC).isoformat(), "override_reason": reason,
                                           "rolled_back_in_dagster_run": context.run.run_id})
    context.log_event(champion_moved(context.instance, f"rolled back by champion_health: {reason}",
                                     {"champion_version": after_v, "previous_champion": before_v,
                                      "override_by": "champion_health", "override_reason": reason}))
    context.log.warning(f"champion v{before_v} -> v{after_v}, rolled back: {reason}")
    notifier.notify("rollback", f"champion v{before_v} -> v{after_v}, rolled back automatically: {reason}. "
                    "Look at what changed before promoting it again.", key=f"rollback-v{before_v}",
                    run_id=context.run.run_id, actions={"rmi_promote": {"version": before_v}, "rmi_ack": {}})
    return f"v{before_v} -> v{after_v}: {reason}"


def live_rates(warehouse: Warehouse, version: str, window: int, others: bool = False,
               tiered: bool = True) -> tuple[dict[str, float], float | None, dict[str, tuple[int, int]]]:
    """Thumbs-down rate per slice (slices with MIN_RATED answers) and over all, in the latest `window` rated answers
    of a model version, or of every other version; and those slices' (rated, thumbs-down) counts. `tiered`: a slice
    is a skill and a tier (a recipe without tiers names them by skill, the app's topic)."""
    rows = warehouse.query(
        "SELECT skill, tier, count(*) AS rated, avg(CASE WHEN rating = 'down' THEN 1.0 ELSE 0.0 END) AS down"
        f" FROM (SELECT * FROM feedback_events WHERE model_version {'<>' if others else '='} ?"
        f" AND rating IS NOT NULL AND {WHOLE_ANSWER} AND tier IS NOT NULL ORDER BY ts DESC LIMIT ?) GROUP BY ALL",
        [version, window])
    rows = sorted(({**r, "slice": slice_name(r["skill"], r["tier"] if tiered else None)} for r in rows.to_dicts()),
                  key=lambda r: r["slice"])
    rated = sum(r["rated"] for r in rows)
    kept = [r for r in rows if r["rated"] >= MIN_RATED]
    return ({r["slice"]: r["down"] for r in kept}, sum(r["rated"] * r["down"] for r in rows) / rated if rated else None,
            {r["slice"]: (int(r["rated"]), round(r["rated"] * r["down"])) for r in kept})
