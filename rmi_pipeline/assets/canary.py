"""canary_verdict: the live A/B between the canary and the alias it is on trial to take, and the alias move that
follows.

With RMI_PROMOTION=canary a challenger that passes the offline gate is not promoted yet: `champion` points the
alias `canary` at it, and the gateways of the champion answer RMI_CANARY_SHARE of users with it (sticky per user).
A derivative is trialled the same way for `fast` (its canary_for tag names the alias; absent, the champion). This
asset judges the canary on what those users said (ml/canary.py): promote (that alias moves to it, one write),
abort (the canary alias is removed, every user is back on that alias, a person is alerted once with the evidence),
or wait for more rated answers. canary_sensor runs it after each ingest while a canary is on trial, and once more
when RMI_CANARY_MAX_HOURS have passed. With RMI_PROMOTION=approval a canary for the champion that would be promoted
waits for a person instead (assets/approval.py), still on trial: its users' evidence keeps growing while they decide,
and a later abort still ends it.
"""

import time
from datetime import UTC, datetime

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, ResourceParam, asset

from ..resources import layout
from ..resources.notifier import Notifier
from ..resources.registry import CANARY, CANARY_FOR, CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import WHOLE_ANSWER, Warehouse
from ..settings import Settings
from .approval import APPROVAL, WAITING, request_approval
from .feedback import feedback_events
from .promotion import STARTED_AT, champion_moved


@asset(deps=[feedback_events], group_name="promotion", kinds={"mlflow", "duckdb"})
def canary_verdict(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
                   registry: ModelRegistry, warehouse: Warehouse, notifier: Notifier) -> MaterializeResult:
    """The canary's users against those of the alias it is on trial to take (champion, or fast) over the same
    feedback batches: thumbs-down per slice with an interval at the gate's confidence. Promotes the canary (that
    alias moves to it; for the champion under RMI_PROMOTION=approval, a person is asked to), aborts it (alias
    removed, one alert) or waits for RMI_CANARY_MIN_EVENTS rated answers (RMI_CANARY_MAX_HOURS at most, then
    decides on what there is). A canary whose users liked answers the audit
    fails more often than the champion's (the live reward-hacking probe) is aborted, not promoted."""
    from ..ml.canary import ABORT, PROMOTE, judge

    canary = registry.version(CANARY)
    if canary is None:
        return MaterializeResult(metadata={"verdict": "none", "reason": "No canary on trial."})
    version, target = str(canary.version), canary.tags.get(CANARY_FOR, CHAMPION)
    held = registry.version(target)
    if held is not None and str(held.version) == version:  # a promotion that died before its last write
        registry.end_canary({"canary_outcome": "promoted"})
        return MaterializeResult(metadata={"verdict": "promote", "canary_version": version, "canary_for": target,
                                           "reason": f"v{version} is already @{target}: its canary alias ended."})
    # judged against the version its alias names; a first `fast` against the champion it would take users from
    baseline_alias, baseline = (target, held) if held is not None else (CHAMPION, registry.version(CHAMPION))
    against = str(baseline.version)
    rules = settings.canary
    started = float(canary.tags.get(STARTED_AT, time.time()))
    hours = (time.time() - started) / 3600
    from ..recipes.base import load_recipe

    periods = live_periods(warehouse, version, against, datetime.fromtimestamp(started, UTC),
                           tiered=load_recipe(settings.recipe).has("generator"))
    verdict = judge(periods, confidence=settings.gate.confidence,
                    tolerance=rules.tolerance, min_events=rules.min_events, timed_out=hours >= rules.max_hours,
                    canary_version=version, champion_version=against, against=baseline_alias)
    if verdict.action == PROMOTE:  # users did not find it worse: did they like answers the audit fails?
        liked_wrong = live_probe(context, settings, warehouse, version, against)
        if liked_wrong is not None and liked_wrong.fired:
            verdict.action = ABORT
            verdict.reason = (f"Aborted: suspected reward hacking. {liked_wrong.sentence}. The thumbs-down alone "
                              f"would promote: {verdict.reason}")
    context.log.info(verdict.reason)
    compared = {"canary_for": target, f"{baseline_alias}_version": against}
    storage.write_json(layout.canary_verdict(version), {**verdict.as_dict(), "hours": hours, **compared})
    moved = {}
    if verdict.action == PROMOTE and target == CHAMPION and settings.promotion == "approval":
        request_approval(context, settings.approval_hours, registry, notifier, version, against, verdict.reason)
        moved = {"approval": registry.tags_of(version)[APPROVAL]}
    elif verdict.action == PROMOTE:
        tags = {"promoted_at": datetime.now(UTC).isoformat(), "promoted_by": "canary",
                "promoted_in_dagster_run": context.run.run_id}
        previous = registry.promote(version, tags) if target == CHAMPION else registry.point(target, version, tags)
        registry.end_canary({"canary_outcome": "promoted"})
        moved = {"alias_moved": f"{target}: v{previous or 'none'} -> v{version}"}
        if target == CHAMPION:
            context.log_event(champion_moved(context.instance, "promoted by canary_verdict", {
                "champion_version": version, "previous_champion": previous or "none", "promoted_by": "canary",
                "reason": verdict.reason}))
        notifier.notify("promotion", f"{target} v{previous} -> v{version} after its canary. {verdict.reason}",
                        key=f"promotion-{version}" if target == CHAMPION else f"promotion-{target}-{version}",
                        run_id=context.run.run_id)
    elif verdict.action == ABORT:
        registry.end_canary({"canary_outcome": "aborted", "canary_reason": verdict.reason[:4000],
                             **({APPROVAL: "aborted"} if canary.tags.get(APPROVAL) == WAITING else {})})
        # the button moves the champion: offered only for a canary on trial to take it
        promote = {"rmi_promote": {"version": version}} if target == CHAMPION else {}
        notifier.notify("canary", f"{verdict.reason} All users are back on {baseline_alias} v{against}.",
                        key=f"canary-abort-{version}", run_id=context.run.run_id, actions={**promote, "rmi_ack": {}})
    return MaterializeResult(metadata={
        "verdict": verdict.action, "reason": verdict.reason, "canary_version": version, **compared, **moved,
        "canary_rated": verdict.canary_rated,
        "champion_rated": verdict.champion_rated, "hours_on_trial": round(hours, 3),
        **{f"thumbs_down_delta {s.name}": round(s.delta, 4) for s in verdict.slices if s.delta is not None},
        "verdict_table": MetadataValue.md(markdown(verdict)),
    })


def live_probe(context, settings: Settings, warehouse: Warehouse, canary: str, champion: str):
    """The reward-hacking probes' live one on the canary's users (assets/probes.live): None without an audit or a
    verifier to check liked answers with."""
    from ..recipes.base import load_recipe
    from .probes import live

    found = live(load_recipe(settings.recipe), warehouse, canary, champion, settings.probes)
    if found is not None:
        context.log.info(found.sentence)
    return found


def live_periods(warehouse: Warehouse, canary: str, champion: str, since: datetime, tiered: bool = True) -> dict:
    """{slice: [Period]}: rated answers and thumbs-down of each arm since the trial began, per feedback batch the
    canary answered in (a version put on trial again is judged on its new trial only); `tiered`: slices are a skill
    and a tier (a recipe without tiers names them by skill, the app's topic)."""
    from ..ml.canary import Period
    from ..recipes.base import slice_name

    rows = warehouse.query(
        "SELECT batch_id, skill, tier, model_version = ? AS canary, count(*) AS rated,"
        " sum(CASE WHEN rating = 'down' THEN 1 ELSE 0 END) AS down FROM feedback_events"
        f" WHERE rating IS NOT NULL AND {WHOLE_ANSWER} AND tier IS NOT NULL AND model_version IN (?, ?) AND ts >= ?"
        " AND batch_id IN (SELECT DISTINCT batch_id FROM feedback_events WHERE model_version = ? AND ts >= ?)"
        " GROUP BY ALL", [canary, canary, champion, since, canary, since])
    cells: dict[tuple[str, str], dict[bool, tuple[int, int]]] = {}
    for r in rows.iter_rows(named=True):
        name = slice_name(r["skill"], r["tier"] if tiered else None)
        cells.setdefault((name, r["batch_id"]), {})[r["canary"]] = (r["rated"], r["down"])
    periods: dict[str, list] = {}
    for (name, _), arms in sorted(cells.items()):
        (n1, d1), (n0, d0) = arms.get(True, (0, 0)), arms.get(False, (0, 0))
        periods.setdefault(name, []).append(Period(int(n1), int(d1), int(n0), int(d0)))
    return periods


def markdown(verdict) -> str:
    """The verdict as the UI shows it: one sentence, then every slice's thumbs-down on each arm."""
    lines = [verdict.reason, "", "| slice | canary rated | canary down | champion rated | champion down | delta | "
             "interval | |", "|---|---|---|---|---|---|---|---|"]
    cell = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    for s in verdict.slices:
        interval = f"{s.low:+.3f} to {s.high:+.3f}" if s.judged else "too few to judge"
        lines.append(f"| {s.name} | {s.canary_rated} | {cell(s.canary_down, '.3f')} | {s.champion_rated} | "
                     f"{cell(s.champion_down, '.3f')} | {cell(s.delta, '+.3f')} | {interval} | "
                     f"{'worse' if s.worse else ''} |")
    return "\n".join(lines)
