"""`rmi generation` and `rmi derivative`: the champion teaches a successor, a larger new generation or a faster
derivative, through the same Dagster jobs the automation runs (docs/explanation/generations.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..settings import Settings
from .home import prepare_home, reach_stores, say

Taught = Annotated[bool, typer.Option("--taught/--untaught", help="Learn from the champion's labels and next-token "
                                      "distributions (RMI_TEACH_*), or from the training set alone (a baseline).")]


def generation(size: Annotated[str, typer.Option(help="The new model's size: one of the recipe's sizes (arithmetic "
                                                      "micro, tiny, small, gpu; words micro, tiny, small, gpu) or a "
                                                      "save_pretrained directory for the Hugging Face recipe.")],
               taught: Taught = True) -> int:
    """Train a new generation from scratch at another size, taught by the champion, then evaluate, gate and promote
    it like any challenger (one improvement_cycle run)."""
    from ..automation.jobs import improvement_cycle
    from .report import CycleRecord

    result, instance = _execute(improvement_cycle.name, "candidate_model", {"size": size, "taught": taught},
                                "generation", f"a new generation at size {size}")
    record = CycleRecord(cycle=0)
    record.read_cycle_run(result, instance)
    say(f"generation at size {size}: challenger v{record.challenger_version}: {record.verdict}. {record.reason}")
    return 0 if record.success else 1


def derivative(size: Annotated[str, typer.Option(help="The derivative's size (default RMI_DERIVATIVE_SIZE): "
                                                      "arithmetic micro, words micro.")] = "",
               taught: Taught = True) -> int:
    """Distil a smaller, faster student from the champion; it takes the alias `fast` if it keeps the champion's
    quality within RMI_DERIVATIVE_TOLERANCE and answers RMI_DERIVATIVE_MIN_SPEEDUP times as fast."""
    from ..assets.derivative import fast_model
    from ..automation.jobs import derivative as job

    result, _ = _execute(job.name, "fast_candidate", {"size": size, "taught": taught}, "derivative",
                         f"a derivative at size {size or Settings().derivative.size}")
    said = [e.materialization.metadata for e in result.get_asset_materialization_events()
            if e.asset_key == fast_model.key]
    if not said:
        failures = [e.event_specific_data.error.message.strip() for e in result.all_events
                    if e.event_type_value == "STEP_FAILURE" and e.event_specific_data.error]
        raise RuntimeError(f"the derivative run failed: {'; '.join(failures) or 'see `rmi ui`'}")
    say(f"derivative v{said[0]['derivative_version'].value}: {said[0]['reason'].value} Moved: "
        f"{said[0]['moved'].value}.")
    return 0


def _execute(job_name: str, op: str, config: dict, trigger: str, what: str):
    """One run of `job_name` in this process, narrated, with `config` for the step `op`; (result, instance)."""
    from dagster import DagsterInstance

    from ..automation.in_process import QUIET_LOGS, launched_here
    from ..definitions import build_definitions
    from ..training.worker import stop_training_workers
    from .progress import narrated, new_run_id

    settings = Settings()
    home = prepare_home(settings)
    defs = build_definitions(settings)
    reach_stores(defs.resources)
    if defs.resources["registry"].version("champion") is None:
        raise LookupError("there is no champion to teach yet: run a first cycle (`rmi run --cycles 0`)")
    instance, run_id = DagsterInstance.get(), new_run_id()
    say(f"rmi {trigger}: {what}, taught by the champion; state in {home}")
    try:
        with narrated(f"[{trigger}]", what, say, instance, run_id):
            result = defs.resolve_job_def(job_name).execute_in_process(
                instance=instance, raise_on_error=False, run_id=run_id,
                run_config={**QUIET_LOGS, "ops": {op: {"config": config}}},
                tags={"rmi/trigger": trigger, f"rmi/{trigger}_size": config["size"] or "default",
                      **launched_here()})
    finally:
        stop_training_workers(home)
    return result, instance
