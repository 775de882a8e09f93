"""The champion: the alias moves to the challenger only when its evaluation says promote, with
RMI_PROMOTION=canary only after its users did not find it worse (assets/canary.py), and with
RMI_PROMOTION=approval only when a person says so (assets/approval.py)."""

import time
from datetime import UTC, datetime

from dagster import AssetExecutionContext, AssetMaterialization, MaterializeResult, ResourceParam, asset

from ..resources import layout
from ..resources.notifier import Notifier
from ..resources.registry import CANARY, CHALLENGER, CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..settings import Settings
from .approval import request_approval
from .evaluation import candidate_evaluation

STARTED_AT = "canary_started_at"  # model version tag: when the canary alias was set (Unix seconds)


@asset(deps=[candidate_evaluation], group_name="promotion", kinds={"mlflow"}, output_required=False)
def champion(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
             registry: ModelRegistry, notifier: Notifier):
    """The MLflow alias `champion` moves to the challenger when its evaluation says promote (one alias write, and an
    alert); a rejected challenger leaves everything as it was. With RMI_PROMOTION=canary a first model is promoted
    so, and a later one becomes the canary instead, which canary_verdict promotes or aborts on what its users say.
    With RMI_PROMOTION=approval, where this would promote, the challenger waits for a person instead.
    Materializes only when the champion changes."""
    challenger = registry.version(CHALLENGER)
    if challenger is None:
        raise LookupError(f"model {registry.model_name!r} has no challenger")
    key = layout.evaluation(challenger.version)
    if not storage.exists(key):
        raise FileNotFoundError(f"challenger v{challenger.version} has not been evaluated ({key})")
    report = storage.read_json(key)
    decision = report["decision"]
    if not decision["promote"]:
        context.log.info(f"champion unchanged: challenger v{challenger.version} rejected: {decision['reason']}")
        return
    current = registry.version(CHAMPION)
    # the champion may already be this challenger: a promotion that died after its alias write is completed
    if str(current.version if current else None) not in (str(report["champion_version"]), str(challenger.version)):
        raise RuntimeError(f"the champion moved since challenger v{challenger.version} was evaluated against "
                           f"v{report['champion_version']}; evaluate again before promoting")
    if current is not None and promotion_mode(settings, storage, context) == "canary":
        replaced = registry.version(CANARY)
        registry.start_canary(challenger.version, trial_tags(context, settings))
        if replaced is not None and str(replaced.version) != str(challenger.version):
            registry.tag(replaced.version, {"canary_outcome": f"replaced by v{challenger.version}"})
        context.log.info(f"challenger v{challenger.version} passed the offline gate: now the canary, answering "
                         f"{settings.canary.share:.0%} of users beside champion v{current.version}"
                         + (f" (it replaces canary v{replaced.version})" if replaced else "")
                         + f". {decision['reason']}")
        return
    if settings.promotion == "approval":
        request_approval(context, settings.approval_hours, registry, notifier, str(challenger.version),
                         str(current.version) if current else None, decision["reason"])
        return
    previous = registry.promote(challenger.version, {
        "promoted_at": datetime.now(UTC).isoformat(), "promoted_by": "gate",
        "promoted_in_dagster_run": context.run.run_id,
    })
    context.log.info(f"champion v{previous} -> v{challenger.version}: {decision['reason']}")
    before = f"v{previous}" if previous else "none"
    notifier.notify("promotion", f"champion {before} -> v{challenger.version}. {decision['reason']}",
                    key=f"promotion-{challenger.version}", run_id=context.run.run_id)
    yield MaterializeResult(metadata={
        "champion_version": str(challenger.version), "previous_champion": str(previous or "none"),
        "anchor_mean": round(report["scores"]["challenger_anchor_mean"], 4), "reason": decision["reason"],
        "promoted_by": "gate",
    })


def trial_tags(context, settings: Settings) -> dict[str, str]:
    """The tags a version put on trial as the canary carries: when its trial began (its verdict counts users' feedback
    from then), in which run, at which share."""
    return {STARTED_AT: str(time.time()), "canary_started_in_dagster_run": context.run.run_id,
            "canary_share": str(settings.canary.share)}


def promotion_mode(settings: Settings, storage: ObjectStore, context, alias: str = CHAMPION) -> str:
    """RMI_PROMOTION's route, with `auto` (and `approval`, which waits for a person at its end) made canary while
    a gateway of `alias` serves users (a canary for it needs them), else offline."""
    mode = settings.promotion
    if mode not in ("auto", "approval"):
        return mode
    gateways = serving_gateways(storage, alias)
    context.log.info(f"RMI_PROMOTION={mode}: {len(gateways)} gateway(s) of @{alias} serve users with a canary "
                     f"share, so promotion is {'canary' if gateways else 'offline'}")
    return "canary" if gateways else "offline"


def serving_gateways(storage: ObjectStore, alias: str = CHAMPION) -> list[dict]:
    """The gateways of `alias` that said in the last HEARTBEAT_SECONDS * 3 that they serve, with a canary share:
    where a canary for that alias would meet users."""
    fresh = []
    for key in storage.list(layout.GATEWAYS):
        try:
            said = storage.read_json(key)
        except (FileNotFoundError, ValueError):  # one that stopped meanwhile, or a half-written file elsewhere
            continue
        if said.get("alias") == alias and said.get("canary_share", 0) > 0 and \
                time.time() - float(said.get("at", 0)) < 3 * layout.HEARTBEAT_SECONDS:
            fresh.append(said)
    return fresh


def champion_moved(instance, description: str, metadata: dict) -> AssetMaterialization:
    """A materialization of `champion` made outside its own step (a canary's verdict, a rollback, a person's
    override), recorded as up to date with the latest candidate_evaluation the way Dagster records a step's inputs.
    Without that, Dagster calls the champion stale (Unsynced) from the next evaluation on, and a click on
    Materialize would run the gate's promotion again over the person's decision."""
    latest = instance.fetch_materializations(candidate_evaluation.key, limit=1).records
    tags = {}
    if latest:  # the tags Dagster writes on a step's materialization: its code version and inputs' data versions
        key = candidate_evaluation.key.to_user_string()
        tags = {"dagster/code_version": "outside its step",
                f"dagster/input_data_version/{key}": latest[0].asset_materialization.tags.get(
                    "dagster/data_version", ""),
                f"dagster/input_event_pointer/{key}": str(latest[0].storage_id)}
    return AssetMaterialization(champion.key, description=description, metadata=metadata, tags=tags)
