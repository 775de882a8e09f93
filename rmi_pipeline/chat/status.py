"""`/rmi status`: the models, the canary, a version waiting for approval, the champion's health, the last cycles
and the latest new generations and derivatives, as Block Kit."""

from __future__ import annotations

from . import blocks
from .blocks import Reply

CYCLES_SHOWN = 5
SUCCESSORS_SHOWN = 3
SLICES_SHOWN = 8  # the gate's slices that moved most


def status(settings, dagster) -> Reply:
    from dagster import DagsterInstance, RunsFilter

    from ..assets import champion_health
    from ..assets.approval import waiting, waiting_line
    from ..assets.derivative import DERIVATIVE_OF
    from ..assets.selection import choice_of
    from ..automation.jobs import successor_line, successor_runs
    from ..resources import build_resources, layout
    from ..resources.registry import CANARY, CHALLENGER, CHAMPION, FAST

    resources = build_resources(settings)
    registry, storage = resources["registry"], resources["storage"]
    champion, challenger, canary = (registry.version(a) for a in (CHAMPION, CHALLENGER, CANARY))
    lines = [f"*Champion* {_model(champion)}", f"*Challenger* {_model(challenger)}"]
    if challenger is not None and (why := choice_of(storage, challenger.version)):
        lines.append(f"*Chosen among several:* {blocks.escape(why)}")
    if canary is not None:
        key = layout.canary_verdict(str(canary.version))
        said = storage.read_json(key)["reason"] if storage.exists(key) else "no verdict yet"
        lines.append(f"*Canary* v{canary.version} on trial, {settings.canary.share:.0%} of users: {said}")
    else:
        lines.append(f"*Canary* none (promotion: {settings.promotion})")
    if (asked := waiting(registry)) is not None:
        lines.append(f"*Approval* {waiting_line(asked, settings.approval_hours)}: `/rmi approve {asked.version} "
                     f"reason...` or `/rmi reject {asked.version} reason...`")
    if (fast := registry.version(FAST)) is not None:
        lines.append(f"*Fast* v{fast.version}, distilled from v{fast.tags.get(DERIVATIVE_OF, '?')}, "
                     f"{fast.tags.get('speedup', '?')}x as fast")
    out = [blocks.section("\n".join(lines))]
    text = f"champion {_model(champion)}; challenger {_model(challenger)}"
    if challenger is not None and storage.exists(layout.evaluation(str(challenger.version))):
        decision = storage.read_json(layout.evaluation(str(challenger.version)))["decision"]
        out.append(blocks.section(f"*Gate on v{challenger.version}:* {blocks.escape(decision['reason'])}"))
        moved = sorted(decision.get("slices", []), key=lambda s: -abs(s["delta"]))[:SLICES_SHOWN]
        if moved:
            out.append(blocks.table(["slice", "champion", "challenger", "delta", "interval"],
                                    [[s["name"], f"{s['champion']:.3f}", f"{s['challenger']:.3f}",
                                      f"{s['delta']:+.3f}", f"[{s['low']:+.3f}, {s['high']:+.3f}]"]
                                     for s in moved]))
    instance = DagsterInstance.get()
    health = instance.fetch_materializations(champion_health.key, limit=1).records
    if health:
        meta = health[0].asset_materialization.metadata
        regressed = meta["regressed_slices"].value if "regressed_slices" in meta else []
        out.append(blocks.section("*Health:* " + (f":warning: regressed on {', '.join(regressed)}" if meta.get(
            "regressed") and meta["regressed"].value else "no slice regressed at the last check")))
    runs = instance.get_runs(RunsFilter(job_name="improvement_cycle"), limit=CYCLES_SHOWN)
    if runs:
        out.append(blocks.section("*Last cycles*\n" + "\n".join(
            f"<{dagster.run_link(r.run_id)}|{r.run_id[:8]}> {r.status.value.lower()}, "
            f"{r.tags.get('rmi/trigger', 'manual')}" for r in runs)))
    successors = successor_runs(instance, SUCCESSORS_SHOWN)
    if successors:
        out.append(blocks.section("*New generations and derivatives*\n" + "\n".join(
            f"<{dagster.run_link(r.dagster_run.run_id)}|{r.dagster_run.run_id[:8]}> "
            f"{blocks.escape(successor_line(kind, r.dagster_run))}" for kind, r in successors)))
    return Reply(text, out)


def _model(mv) -> str:
    from ..assets.training import GENERATION, MODEL_SIZE

    if mv is None:
        return "none"
    return (f"v{mv.version} (anchor mean {mv.tags.get('eval_anchor_mean', '?')}, generation "
            f"{mv.tags.get(GENERATION, '1')}, size {mv.tags.get(MODEL_SIZE, '?')})")
