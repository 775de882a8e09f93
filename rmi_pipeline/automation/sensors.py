"""The sensors that turn the loop by itself.

new_feedback_sensor: every batch file that lands in feedback/incoming/ becomes a partition and an ingest run.
enough_feedback_sensor: enough newly ingested feedback starts an improvement cycle.
regression_sensor: a regressed champion_health starts a targeted cycle, within a retry budget.
canary_sensor: while a canary is on trial, each ingest (and its time running out) asks canary_verdict for a verdict.
generation_sensor: when the champion's gains stall, a new generation of RMI_GENERATION_SIZE, within a budget.
derivative_sensor: after each promotion, a derivative of RMI_DERIVATIVE_SIZE distilled from the new champion.
approval_deadline_sensor: a version left waiting for a person's approval past RMI_APPROVAL_HOURS is dropped.
"""

from dagster import (
    DefaultSensorStatus,
    ResourceParam,
    RunConfig,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from ..assets import candidate_evaluation, champion, champion_health, feedback_events, training_dataset
from ..assets.approval import waiting
from ..assets.derivative import DerivativeConfig, fast_candidate
from ..assets.partitions import can_be_partition, feedback_batches
from ..assets.promotion import STARTED_AT
from ..assets.training import CandidateConfig
from ..resources import layout
from ..resources.notifier import Notifier
from ..resources.registry import ModelRegistry
from ..resources.storage import ObjectStore
from ..schema import SUFFIXES, is_batch_file
from ..settings import Settings
from .jobs import (
    ACTIVE,
    canary_trial,
    cycle_run_config,
    derivative,
    improvement_cycle,
    ingest_feedback,
    waiting_to_start,
)


@sensor(job=ingest_feedback, default_status=DefaultSensorStatus.RUNNING,
        description="Every RMI_FEEDBACK_INTERVAL_SECONDS: each batch file new in "
                    "feedback/incoming/ (.jsonl, .jsonl.gz, .parquet) becomes a "
                    "feedback_batch partition and an ingest_feedback run; a batch whose ingest failed or died is "
                    "ingested again (RMI_FEEDBACK_INGEST_RETRIES, doubling backoff), then a person is alerted. Files "
                    "it cannot take (names Dagster refuses, links) are named in the tick's log.")
def new_feedback_sensor(context: SensorEvaluationContext, settings: ResourceParam[Settings], storage: ObjectStore,
                        notifier: Notifier):
    """Compares the landed files with the batches that landed in the warehouse, so no file is missed or stranded."""
    from .batches import batch_states

    files, others = storage.listing(layout.INCOMING)
    names = [key.rsplit("/", 1)[-1] for key in files]
    batches = [n for n in names if is_batch_file(n)]
    unusable = [n for n in batches if not can_be_partition(n)]
    if unusable:  # said on every tick, in the sensor's log in the UI, until someone renames the file
        context.log.warning(f"batch files whose names cannot be partitions (rename them): {unusable[:10]}")
    if others:
        context.log.warning(f"skipped in {layout.INCOMING}/, not plain files: {others[:10]}")
    states = batch_states(context.instance, [n for n in batches if can_be_partition(n)], storage, settings)
    for batch in states.values():
        if batch.state == "given_up":
            context.log.warning(f"batch {batch.name} failed to land {batch.attempts} times; not tried again")
            notifier.notify("ingest", f"feedback batch {batch.name} failed to land {batch.attempts} times and is not "
                            "tried again: its file stays in incoming/. Fix the cause, then `rmi feedback ingest`.",
                            key=f"ingest-given-up-{batch.name}", run_id=batch.last_run_id)
        elif batch.state == "backoff":
            context.log.info(f"batch {batch.name}: attempt {batch.attempts} failed; next in {batch.wait_seconds:.0f} s")
    todo = [b for b in states.values() if b.state in ("new", "retry")]
    if not todo:
        ignored = len(names) - len(batches)
        waiting = sum(b.state in ("landing", "backoff") for b in states.values())
        return SkipReason(f"no new feedback batch among {len(names)} files"
                          + (f"; {waiting} landing or waiting to retry" if waiting else "")
                          + (f"; {ignored} ignored, not {' / '.join(SUFFIXES)}" if ignored else ""))
    return SensorResult(
        run_requests=[RunRequest(partition_key=b.name, run_key=f"{b.name}#{b.attempts + 1}" if b.attempts else b.name,
                                 tags={"rmi/trigger": "retry" if b.attempts else "new_feedback",
                                       "rmi/attempt": str(b.attempts + 1)}) for b in todo],
        dynamic_partitions_requests=[feedback_batches.build_add_request([b.name for b in todo if b.state == "new"])],
    )


@sensor(job=improvement_cycle, default_status=DefaultSensorStatus.RUNNING,
        description="Every RMI_FEEDBACK_INTERVAL_SECONDS: once RMI_CYCLE_MIN_NEW_EVENTS feedback "
                    "events have landed since the last training "
                    "dataset, starts an improvement_cycle (one at a time; none while a canary is on trial or a "
                    "version waits for a person's approval).")
def enough_feedback_sensor(context: SensorEvaluationContext, settings: ResourceParam[Settings],
                           registry: ModelRegistry):
    """Starts an improvement cycle once RMI_CYCLE_MIN_NEW_EVENTS events have been ingested since the last dataset.

    It reads Dagster's event log: the `ingested` counts of feedback_events materializations newer than the latest
    training_dataset materialization (which took every event before it). No cursor to lose, and it never opens
    the warehouse, which a running ingest may hold. It waits while a cycle is already queued or running, and while
    a canary is on trial or a version waits for approval: a challenger passing the gate would replace it before its
    users or a person had their say (with a cycle every few minutes, no canary was ever judged)."""
    from dagster import AssetRecordsFilter, RunsFilter

    from ..resources.registry import CANARY

    instance = context.instance
    last = instance.fetch_materializations(training_dataset.key, limit=1).records
    after = last[0].storage_id if last else None
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=feedback_events.key, after_storage_id=after), limit=10000).records
    pending = sum(int(r.asset_materialization.metadata["ingested"].value) for r in records
                  if "ingested" in r.asset_materialization.metadata)
    threshold = settings.automation.cycle_min_new_events
    if pending < threshold:
        return SkipReason(f"{pending} new feedback events since the last dataset (a cycle starts at {threshold})")
    if instance.get_runs(RunsFilter(job_name=improvement_cycle.name, statuses=ACTIVE), limit=1):
        return SkipReason(f"{pending} new feedback events wait for the running cycle")
    if (canary := registry.version(CANARY)) is not None:
        return SkipReason(f"{pending} new feedback events wait for canary v{canary.version}'s verdict")
    if (asked := waiting(registry)) is not None:
        return SkipReason(f"{pending} new feedback events wait for a person's approval of v{asked.version}")
    newest = max(r.storage_id for r in records)
    return RunRequest(run_key=f"feedback-{after}-{newest}",  # one cycle per state of the event log
                      run_config=cycle_run_config(settings),
                      tags={"rmi/trigger": "new_feedback", "rmi/new_events": str(pending)})


@sensor(job=improvement_cycle, default_status=DefaultSensorStatus.RUNNING,
        description="Every RMI_SENSOR_INTERVAL_SECONDS: when champion_health says the champion "
                    "regressed, starts an improvement_cycle "
                    "aimed at the regressed slices, at most RMI_REGRESSION_BUDGET per champion with a doubling "
                    "backoff; then alerts a person instead.")
def regression_sensor(context: SensorEvaluationContext, settings: ResourceParam[Settings], notifier: Notifier):
    """A regressed champion_health starts a cycle aimed at the regressed slices (weighted, trained longer).

    Each champion gets RMI_REGRESSION_BUDGET such cycles, spaced by a doubling backoff; a challenger that fails
    the gate uses one up like any other. When they are spent and the last one has finished, a person is alerted
    once instead of looping. A verdict about a champion that has since been replaced waits for the new one's."""
    import time

    from dagster import DagsterRunStatus, RunsFilter

    rules = settings.regression
    instance = context.instance
    latest = instance.fetch_materializations(champion_health.key, limit=1).records
    meta = latest[0].asset_materialization.metadata if latest else {}
    if "regressed" not in meta or not meta["regressed"].value:
        return SkipReason("the champion is healthy")
    moved = instance.fetch_materializations(champion.key, limit=1).records
    if moved and moved[0].storage_id > latest[0].storage_id:
        return SkipReason("the champion changed since the last health check: waiting for its own")
    if any(r.status not in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
           for r in instance.get_runs(RunsFilter(job_name=improvement_cycle.name), limit=5)):
        return SkipReason("a cycle is already running")
    version, slices = meta["champion_version"].value, meta["regressed_slices"].value
    named = ", ".join(slices)
    tags = {"rmi/trigger": "regression", "rmi/champion": version}
    attempts = instance.get_runs(RunsFilter(job_name=improvement_cycle.name, tags=tags))
    if len(attempts) >= rules.budget:
        notifier.notify("budget", f"champion v{version} regressed on {named}; {len(attempts)} targeted cycles did "
                        "not fix it. A person must look: data, recipe or eval.", key=f"budget-v{version}",
                        run_id=attempts[0].run_id,
                        actions={"rmi_rollback": {}, "rmi_cycle": {"slices": slices}, "rmi_ack": {}})
        return SkipReason(f"regression budget spent for champion v{version} ({len(attempts)} attempts)")
    if attempts:
        last = instance.get_run_record_by_id(attempts[0].run_id)
        wait = rules.backoff_seconds * 2 ** (len(attempts) - 1)
        if last.end_time and time.time() < last.end_time + wait:
            return SkipReason(f"backing off {wait:.0f} s after attempt {len(attempts)}")
    aim = CandidateConfig(focus=slices, focus_weight=rules.focus_weight, steps_multiplier=rules.steps_multiplier)
    return RunRequest(
        run_key=f"regression-v{version}-{len(attempts) + 1}",  # one run per attempt, however many ticks ask
        run_config=cycle_run_config(settings, aim),
        tags={**tags, "rmi/focus": named[:200], "rmi/attempt": str(len(attempts) + 1)},
    )


@sensor(job=canary_trial, default_status=DefaultSensorStatus.RUNNING,
        description="Every RMI_SENSOR_INTERVAL_SECONDS, while a canary is on trial: after each "
                    "ingest of feedback (after the last of "
                    "a queue of them), and once when RMI_CANARY_MAX_HOURS have passed, runs canary_verdict "
                    "(promote, abort, or wait for RMI_CANARY_MIN_EVENTS rated canary answers).")
def canary_sensor(context: SensorEvaluationContext, settings: ResourceParam[Settings], registry: ModelRegistry):
    """One verdict per state of the event log (the newest feedback_events materialization) for each canary, and
    one at its timeout; it reads the registry's alias, never the warehouse an ingest may hold."""
    import time

    from ..resources.registry import CANARY

    canary = registry.version(CANARY)
    if canary is None:
        return SkipReason("no canary on trial")
    if waiting := waiting_to_start(context.instance, ingest_feedback, canary_trial):
        return SkipReason(f"canary v{canary.version}: a {waiting} run waits to start; the verdict comes after it")
    latest = context.instance.fetch_materializations(feedback_events.key, limit=1).records
    hours = (time.time() - float(canary.tags.get(STARTED_AT, time.time()))) / 3600
    if hours >= settings.canary.max_hours:
        key = f"canary-v{canary.version}-timeout"
    elif latest:
        key = f"canary-v{canary.version}-after-{latest[0].storage_id}"
    else:
        return SkipReason(f"canary v{canary.version}: no feedback ingested yet")
    return RunRequest(run_key=key, tags={"rmi/trigger": "canary", "rmi/canary": str(canary.version)})


@sensor(job=improvement_cycle, default_status=DefaultSensorStatus.RUNNING,
        description="Every RMI_SENSOR_INTERVAL_SECONDS, while RMI_GENERATION_SIZE is set: when "
                    "the last RMI_GENERATION_STALL_CYCLES evaluations each gained less than RMI_GENERATION_STALL_GAIN "
                    "over the champion, starts an improvement_cycle that trains a new generation of that size from "
                    "scratch, taught by the champion; at most RMI_GENERATION_BUDGET per champion, one cycle at a "
                    "time, none while a canary is on trial. `/rmi stop generation` stops one.")
def generation_sensor(context: SensorEvaluationContext, settings: ResourceParam[Settings], registry: ModelRegistry):
    """Warm-started cycles that no longer move the champion start a new generation, which can learn what they
    cannot; the budget keeps one the gate turns down from being trained again and again for the same champion."""
    from dagster import RunsFilter

    from ..resources.registry import CANARY, CHAMPION

    rules, instance = settings.generations, context.instance
    if not rules.size:
        return SkipReason("no automatic new generation: RMI_GENERATION_SIZE is unset (`rmi generation` starts one)")
    champion_mv = registry.version(CHAMPION)
    if champion_mv is None:
        return SkipReason("no champion yet to teach a new generation")
    version = str(champion_mv.version)
    records = instance.fetch_materializations(candidate_evaluation.key, limit=rules.stall_cycles).records
    gains = [r.asset_materialization.metadata["gain"].value if "gain" in r.asset_materialization.metadata else None
             for r in records]  # a first model's evaluation has no gain: it was progress from nothing
    said = ", ".join("first model" if g is None else f"{g:+.3f}" for g in gains)
    if len(gains) < rules.stall_cycles:
        return SkipReason(f"{len(gains)} of {rules.stall_cycles} evaluations so far: the gains stall after "
                          f"{rules.stall_cycles} in a row under {rules.stall_gain:+.3f}")
    if not all(g is not None and g < rules.stall_gain for g in gains):
        return SkipReason(f"the gains have not stalled: the last {len(gains)} were {said} (a new generation starts "
                          f"when all are under {rules.stall_gain:+.3f})")
    tags = {"rmi/trigger": "generation", "rmi/champion": version}
    attempts = instance.get_runs(RunsFilter(job_name=improvement_cycle.name, tags=tags))
    if len(attempts) >= rules.budget:
        return SkipReason(f"the gains stalled ({said}), and champion v{version} has used its budget: "
                          f"{len(attempts)} of RMI_GENERATION_BUDGET={rules.budget} new generations")
    if instance.get_runs(RunsFilter(job_name=improvement_cycle.name, statuses=ACTIVE), limit=1):
        return SkipReason("the gains stalled: a new generation waits for the running cycle")
    if (canary := registry.version(CANARY)) is not None:
        return SkipReason(f"the gains stalled: a new generation waits for canary v{canary.version}'s verdict")
    if (asked := waiting(registry)) is not None:
        return SkipReason(f"the gains stalled: a new generation waits for a person's approval of v{asked.version}")
    return RunRequest(
        run_key=f"generation-v{version}-{len(attempts) + 1}",  # one run per attempt, however many ticks ask
        run_config=cycle_run_config(settings, CandidateConfig(size=rules.size, taught=True)),
        tags={**tags, "rmi/generation_size": rules.size, "rmi/gains": said[:200]},
    )


@sensor(job=derivative, default_status=DefaultSensorStatus.RUNNING,
        description="Every RMI_SENSOR_INTERVAL_SECONDS, while RMI_DERIVATIVE_SIZE is set: once "
                    "per champion (after each promotion), starts a derivative run that distils a smaller student of "
                    "that size from it, which takes the alias `fast` if it keeps the champion's quality and answers "
                    "faster. `/rmi stop derivative` stops one.")
def derivative_sensor(context: SensorEvaluationContext, settings: ResourceParam[Settings], registry: ModelRegistry,
                      storage: ObjectStore):
    """A derivative serves the champion's quality faster, so each new champion gets one, once: a run that failed
    or was stopped is not tried again by itself (`rmi derivative` or `/rmi derivative` trains another)."""
    from dagster import RunsFilter

    from ..resources.registry import CHAMPION

    size, instance = settings.derivative.size, context.instance
    if not size:
        return SkipReason("no automatic derivative: RMI_DERIVATIVE_SIZE is unset (`rmi derivative` trains one)")
    champion_mv = registry.version(CHAMPION)
    if champion_mv is None:
        return SkipReason("no champion yet to distil a derivative from")
    version = str(champion_mv.version)
    latest = storage.read_json(layout.DERIVATIVE_LATEST) if storage.exists(layout.DERIVATIVE_LATEST) else {}
    if latest.get("champion") == version:
        return SkipReason(f"champion v{version} has its derivative: v{latest['version']}")
    asked = instance.get_runs(RunsFilter(job_name=derivative.name, tags={"rmi/champion": version}), limit=1)
    if asked:
        return SkipReason(f"champion v{version}'s derivative was asked for already (run {asked[0].run_id[:8]}, "
                          f"{asked[0].status.value.lower()}); `rmi derivative` trains another")
    active = instance.get_runs(RunsFilter(job_name=derivative.name, statuses=ACTIVE), limit=1)
    if active:
        return SkipReason(f"champion v{version}'s derivative waits for derivative run {active[0].run_id[:8]}")
    return RunRequest(
        run_key=f"derivative-v{version}",  # one per champion: Dagster drops a second request with this key
        run_config=RunConfig(ops={fast_candidate.op.name: DerivativeConfig(size=size, taught=True)}),
        tags={"rmi/trigger": "derivative", "rmi/champion": version, "rmi/derivative_size": size},
    )


@sensor(default_status=DefaultSensorStatus.RUNNING,
        description="Every RMI_SENSOR_INTERVAL_SECONDS, with RMI_PROMOTION=approval: a version "
                    "left waiting for a person's approval past RMI_APPROVAL_HOURS (72 by default) is dropped "
                    "(approval: expired; no longer challenger or canary; the champion stays) and a person is "
                    "alerted. `rmi promote VERSION` still promotes it by hand.")
def approval_deadline_sensor(context: SensorEvaluationContext, settings: ResourceParam[Settings],
                             registry: ModelRegistry, notifier: Notifier):
    """An unanswered request must not keep a challenger, and the cycles that wait for it, in limbo for ever. One
    search of the registry by tag per tick."""
    from datetime import UTC, datetime

    from ..assets.approval import window
    from ..resources.registry import CHAMPION
    from .overrides import drop

    asked = waiting(registry)
    if asked is None:
        return SkipReason("no version waits for approval")
    since, until = window(asked, settings.approval_hours)
    now = datetime.now(UTC)
    if now < until:
        return SkipReason(f"v{asked.version} waits for approval until {until:%Y-%m-%d %H:%M} UTC")
    version = str(asked.version)
    said = (f"v{version} waited for a person's approval from {since:%Y-%m-%d %H:%M} UTC past its deadline "
            f"({settings.approval_hours:g} h, RMI_APPROVAL_HOURS) and was dropped")
    removed = drop(registry, context.instance, version, "expired", said, {"approval_expired_at": now.isoformat()})
    held = registry.version(CHAMPION)
    notifier.notify("approval", f"{said}" + (f" (no longer {' or '.join(removed)})" if removed else "")
                    + f"; champion stays v{held.version if held else 'none'}. `rmi promote {version} --reason ...` "
                    "still promotes it by hand.", key=f"approval-expired-{version}", actions={"rmi_ack": {}})
    return SkipReason(said)
