"""The jobs of the loop: ingest one feedback batch, run one improvement cycle, distil a derivative, check the
champion's health; and which runs train the champion's successors (a new generation, a derivative)."""

from dagster import AssetSelection, DagsterRunStatus, define_asset_job, multi_or_in_process_executor

from ..assets import CYCLE, DERIVATIVE, FEEDBACK, canary_verdict, champion_health
from ..assets.partitions import feedback_batches

# the queue runs one run at a time (dagster.yaml): feedback on its way to a promotion goes ahead of health checks,
# derivatives and deletions queued before it, which wait one cycle
AHEAD = {"dagster/priority": "1"}

ingest_feedback = define_asset_job(
    "ingest_feedback",
    selection=AssetSelection.assets(*FEEDBACK),
    partitions_def=feedback_batches,
    description="Validate one landed feedback batch and land its events in the warehouse.",
    tags=AHEAD,
)

improvement_cycle = define_asset_job(
    "improvement_cycle",
    selection=AssetSelection.assets(*CYCLE),
    description="Dataset from all feedback -> candidate(s) -> the best of several chosen -> evaluation against the "
                "champion -> promotion.",
    # in the run's own process unless a launch asks for several processes (cycle_run_config)
    executor_def=multi_or_in_process_executor, config={"execution": {"config": {"in_process": {}}}},
    tags=AHEAD,
)


def cycle_run_config(settings, candidate=None) -> dict:
    """An improvement_cycle's run config: `candidate` (a CandidateConfig, or its fields) for candidate_model, and
    with RMI_MAX_PARALLEL_TRAINING above one, Dagster's multiprocess executor, a process a step forked from a server
    that has imported the loop (STEP_PRELOAD), so that that many challengers train at the same time. Otherwise every
    step runs in the run's own process (the job's default)."""
    from ..assets.training import candidate_model

    config = {}
    if candidate is not None:
        fields = candidate if isinstance(candidate, dict) else candidate.model_dump()
        config["ops"] = {candidate_model.node_def.name: {"config": fields}}
    rules = settings.candidates
    if rules.challengers > 1 and rules.max_parallel_training > 1:
        config["execution"] = {"config": {"multiprocess": {
            "max_concurrent": rules.max_parallel_training,
            "start_method": {"forkserver": {"preload_modules": list(STEP_PRELOAD)}}}}}
    return config


# what every step imports, loaded once in the forkserver its processes fork from: a spawned step spent about 3 s
# of CPU importing them anew
STEP_PRELOAD = ("rmi_pipeline.definitions", "torch", "polars", "duckdb", "mlflow")


derivative = define_asset_job(
    "derivative",
    selection=AssetSelection.assets(*DERIVATIVE),
    description="A smaller student distilled from the champion on the latest dataset -> kept as `fast` if it keeps "
                "the champion's quality and answers faster (RMI_DERIVATIVE_*).",
)

health_check = define_asset_job(
    "health_check",
    selection=AssetSelection.assets(champion_health),
    description="The champion on the current eval suite and its live thumbs-down rates, against its baseline.",
)

canary_trial = define_asset_job(
    "canary_trial",
    selection=AssetSelection.assets(canary_verdict),
    description="The canary's users against the champion's: promote it, abort it, or wait for more rated answers.",
)


def waiting_to_start(instance, *jobs) -> str | None:
    """The first of `jobs` with a run in the queue that has not started, else None. A check or a verdict already
    waiting will read the latest state when it runs, so asking for another per batch only lengthens the queue
    (with one run at a time, a batch a minute had a backlog of 30 runs within 10 minutes)."""
    from dagster import DagsterRunStatus, RunsFilter

    waiting = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING]
    return next((job.name for job in jobs
                 if instance.get_runs(RunsFilter(job_name=job.name, statuses=waiting), limit=1)), None)


# a run that has not finished, nor is being stopped
ACTIVE = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]

# the runs that train the champion's successors, by what a person calls them: their job, and the tags that tell them
# from that job's other runs (every derivative run is one; a new generation is an improvement_cycle run)
SUCCESSORS = {"generation": (improvement_cycle.name, {"rmi/trigger": "generation"}),
              "derivative": (derivative.name, {})}


def successor_runs(instance, limit: int) -> list[tuple[str, object]]:
    """(kind, run record) of the latest new-generation and derivative runs together, newest first."""
    from dagster import RunsFilter

    records = [(kind, record) for kind, (job, tags) in SUCCESSORS.items()
               for record in instance.get_run_records(RunsFilter(job_name=job, tags=tags), limit=limit)]
    return sorted(records, key=lambda kr: kr[1].create_timestamp, reverse=True)[:limit]


def successor_line(kind: str, run) -> str:
    """One successor run in words: kind, size, status, the champion it was started for, and by whom."""
    tags = run.tags
    champion = f", for champion v{tags['rmi/champion']}" if "rmi/champion" in tags else ""
    by = tags.get("rmi/requested_by") or tags.get("dagster/sensor_name") or f"`rmi {kind}`"
    name = "new generation" if kind == "generation" else kind
    return (f"{name} at size {tags.get(f'rmi/{kind}_size', 'default')}: {run.status.value.lower()}{champion}, "
            f"started by {by}")
