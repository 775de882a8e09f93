"""reward_model: users' ratings teach a head on the champion's backbone what they like; its picks of the champion's
sampled answers become training rows (best_of_n) where it forecasts held-out ratings better than their base rate.

It learns from thumbs, which sycophancy and a confident tone also earn, so it never gates a promotion: the sealed
eval and the judge do (ml/reward.py).
"""

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, ResourceParam, asset

from ..resources import layout
from ..resources.registry import CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import WHOLE_ANSWER, Warehouse
from ..settings import Settings
from .feedback import feedback_events

_RATED = ("SELECT prompt, completion, rating = 'up' AS up FROM feedback_events WHERE rating IN ('up', 'down') "
          f"AND source = 'user' AND {WHOLE_ANSWER} AND completion IS NOT NULL ORDER BY ts DESC, event_id LIMIT ?")
_ASKED = "SELECT prompt FROM feedback_events WHERE source = 'user' ORDER BY ts DESC, event_id LIMIT ?"


@asset(deps=[feedback_events], group_name="training", kinds={"pytorch", "parquet"})
def reward_model(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
                 warehouse: Warehouse, registry: ModelRegistry) -> MaterializeResult:
    """A reward model, P(thumbs-up | prompt, answer), trained on the latest rated answers (a head on the champion's
    backbone), its Brier score and reliability curve on ratings it never saw against the base rate's, and the best
    of the champion's sampled answers to recent prompts as best_of_n rows (`practice/v<champion>-<events>-best-of-n
    .parquet`), only where it beats the base rate. Made only where RMI_MIX gives best_of_n a share; never gates."""
    import time

    import polars as pl

    from ..ml import reward
    from ..ml.hygiene import is_mined_holdout
    from ..ml.seeding import turn_seed
    from ..recipes.base import load_recipe

    config, recipe = settings.reward, load_recipe(settings.recipe)

    def without_rows(status: str, **meta) -> MaterializeResult:
        storage.write_json(layout.BEST_OF_N_LATEST, {"champion_version": None})
        return MaterializeResult(metadata={"status": status, **meta})

    if not recipe.has("backbone"):
        return without_rows("skipped", skipped=recipe.skipped()["backbone"])
    if not settings.mix["best_of_n"]:
        return without_rows("turned off: RMI_MIX gives best_of_n no share")
    champion = registry.version(CHAMPION)
    if champion is None:
        return without_rows("no champion yet")
    rated = warehouse.query(_RATED, [config.ratings])
    usable = [(p, a, bool(up)) for p, a, up in rated.iter_rows()
              if recipe.is_valid_prompt(p) and recipe.is_valid_completion(a)]
    held = [is_mined_holdout(recipe.prompt_hash(p), config.held_out_share) for p, _, _ in usable]
    train = [r for r, h in zip(usable, held, strict=True) if not h]
    test = [r for r, h in zip(usable, held, strict=True) if h]
    ups = sum(r[2] for r in train)
    if len(train) < config.min_ratings or not 0 < ups < len(train) or not test:
        return without_rows("waiting for ratings", rated_answers=len(usable), rated_up=ups,
                            needed=f"{config.min_ratings} to train on, both thumbs among them, and some held out")
    started = time.perf_counter()
    version, checkpoint = registry.checkpoint(champion.version)
    backbone = recipe.load_checkpoint(checkpoint, config.learning_rate, config.steps)
    model = reward.train_reward_model(recipe, backbone, *zip(*train, strict=True), steps=config.steps,
                                      batch_size=config.batch_size, learning_rate=config.learning_rate,
                                      seed=settings.seed)
    measured = reward.calibration(reward.scores(model, [r[0] for r in test], [r[1] for r in test]),
                                  [r[2] for r in test], ups / len(train))
    meta = {"champion_version": version, "rated_answers": len(train), "held_out_ratings": measured.ratings,
            "brier": round(measured.brier, 4), "base_rate_brier": round(measured.base_brier, 4),
            "skill": round(measured.skill, 4), "beats_base_rate": measured.beats_base_rate,
            "forecast_thumbs_up": round(measured.forecast_up, 4), "users_thumbs_up": round(measured.observed_up, 4),
            "reliability": MetadataValue.md(measured.curve()),
            "train_seconds": round(time.perf_counter() - started, 2)}
    context.log.info(f"reward model on {len(train)} rated answers: Brier {measured.brier:.4f} against the base "
                     f"rate's {measured.base_brier:.4f} on {measured.ratings} held out")
    if not measured.beats_base_rate:
        return without_rows("kept no rows: it does not forecast held-out ratings better than their base rate",
                            **meta)
    asked = warehouse.query(_ASKED, [10 * config.prompts])["prompt"].to_list()
    prompts = list(dict.fromkeys(p for p in asked if recipe.is_valid_prompt(p)))[:config.prompts]
    retry = registry.candidates_since(champion.version)
    picked = reward.best_of_n(recipe, recipe.load_model(checkpoint),
                              lambda p, a: reward.scores(model, p, a), prompts, config.samples,
                              settings.sampling.temperature, turn_seed(settings.seed, version, retry),
                              config.min_score)
    events = warehouse.query("SELECT count(*) AS n FROM feedback_events")["n"][0]
    frame = pl.DataFrame(picked.rows, schema={"prompt": pl.String, "target": pl.String, "source": pl.String}
                         ).with_columns(scale=pl.lit(1.0), reference=pl.lit(None, pl.String),
                                        teacher=pl.lit(None, pl.String))
    path = layout.best_of_n_rows(version, events)
    storage.write_parquet(path, frame)
    storage.write_bytes(layout.reward_model(version), reward.dumps(model))  # a signal the probes hold up too
    storage.write_json(layout.BEST_OF_N_LATEST, {"champion_version": version, "rows": path,
                                                 "reward_model": layout.reward_model(version)})
    return MaterializeResult(metadata={"status": "made rows", **meta, **picked.meta})
