"""Practice: what the champion makes for its successor, beyond the users' feedback (ml/practice.py says how).

training_dataset mixes these rows with the feedback; each source is turned off by a zero share in RMI_MIX.
"""

import random
import time

from dagster import AssetExecutionContext, MaterializeResult, ResourceParam, asset

from ..resources import layout
from ..resources.registry import CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import WHOLE_ANSWER, Warehouse
from ..settings import Settings
from .evals import eval_suite
from .feedback import feedback_events

# the prompts a champion's users gave a thumbs-down on its whole answers, newest first: where it fails
FAILED = (f"SELECT prompt FROM feedback_events WHERE model_version = ? AND rating = 'down' AND {WHOLE_ANSWER} "
          "ORDER BY ts DESC, event_id LIMIT ?")


@asset(deps=[feedback_events, eval_suite], group_name="training", kinds={"pytorch", "parquet"})
def practice(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
             warehouse: Warehouse, registry: ModelRegistry) -> MaterializeResult:
    """Rows the champion makes for its successor (`practice/v<champion>-<events>.parquet`): harder problems it
    solved, RL groups scored by the verifier, answers it found with the coach's hints, and labels it backs up, up to
    the eval suite's top tier per skill ("reach"). Only the sources with a share in RMI_MIX are made (all four by
    default)."""
    import polars as pl

    from ..ml.curriculum import reach
    from ..ml.practice import SOURCES, practise, retry_prompts
    from ..ml.seeding import turn_seed
    from ..recipes.base import load_recipe

    mix, recipe = settings.mix, load_recipe(settings.recipe)
    if not (recipe.has("generator") and recipe.has("verifier")):  # problems to practise, and a way to check them
        storage.write_json(layout.PRACTICE_LATEST, {"champion_version": None})
        lacking = recipe.skipped()
        return MaterializeResult(metadata={"status": "skipped", "skipped": "; ".join(
            lacking[c] for c in ("generator", "verifier") if c in lacking)})
    champion = registry.version(CHAMPION)
    if champion is None or not any(mix[s] for s in SOURCES):
        storage.write_json(layout.PRACTICE_LATEST, {"champion_version": None})
        return MaterializeResult(metadata={"status": "no champion yet" if champion is None else "turned off"})
    model = registry.load(champion.version, recipe)
    events = warehouse.query("SELECT count(*) AS n FROM feedback_events")["n"][0]
    retry = registry.candidates_since(champion.version)  # after a turned-down candidate, other problems
    key = f"{settings.seed}-{champion.version}-{events}" + (f"-retry{retry}" if retry else "")
    rng, seed = random.Random(f"practice-{key}"), turn_seed(settings.seed, champion.version, retry)
    down = warehouse.query(FAILED, [str(champion.version), 4 * settings.practice.failed_prompts])
    failed = retry_prompts(recipe, down["prompt"].to_list(), settings.evals.mined_share,
                           settings.practice.failed_prompts)
    last = reach(recipe, storage.read_json(layout.EVAL_MANIFEST)["slices"])
    started = time.perf_counter()
    made = practise(recipe, model, mix, failed, rng, seed, practice=settings.practice, sampling=settings.sampling,
                    self_labelling=settings.self_labelling, saturation=settings.saturation, reach=last)
    compute_seconds = time.perf_counter() - started  # the champion's decoding and the verifier
    if made.failed_prompts is not None:
        storage.write_json(layout.practice_failed(champion.version), {"prompts": made.failed_prompts})

    frame = pl.DataFrame(made.rows, schema={"prompt": pl.String, "target": pl.String, "source": pl.String,
                                            "scale": pl.Float64, "reference": pl.String,
                                            "teacher": pl.String}
                         ).with_columns(pl.col("scale").fill_null(1.0))
    path = layout.practice_rows(champion.version, events)
    storage.write_parquet(path, frame)
    storage.write_json(layout.PRACTICE_LATEST, {"champion_version": str(champion.version), "rows": path})
    counts = {r["source"]: r["len"] for r in frame.group_by("source").len().to_dicts()}
    context.log.info(f"practice from champion v{champion.version}: {counts}")
    meta = {"champion_version": str(champion.version), "retry": retry,
            "practice_compute_seconds": round(compute_seconds, 2),
            **{f"reach {s}": t for s, t in last.items()}, **made.meta}
    return MaterializeResult(metadata={**meta, **{f"rows_{s}": n for s, n in counts.items()}, "rows": len(frame)})
