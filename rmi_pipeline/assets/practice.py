"""Practice: what the champion makes for its successor, beyond the users' feedback.

At the first tier each skill has not yet solved (the frontier), and RMI_PRACTICE_TIERS - 1 tiers past it, it gets
generated practice problems and keeps the answers the recipe's verifier accepts; on those problems and on its
latest thumbs-down prompts it samples groups of answers for RL; its failures get a second attempt with the
verifier's critique as a hint (hinted successes are distilled); and just past its reliable range it labels
problems itself (that tier and RMI_PRACTICE_TIERS - 1 past it), keeping only answers it backs up.
Each source can be turned off by a zero share in RMI_MIX. training_dataset mixes these rows with the feedback.
"""

import random

from dagster import AssetExecutionContext, MaterializeResult, asset

from ..resources import layout
from ..resources.registry import CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import Warehouse
from ..settings import Settings
from .evals import eval_suite
from .feedback import feedback_events

FRONTIER_PROBLEMS = 100  # generated problems per skill and tier that measure where the champion stands


@asset(deps=[feedback_events, eval_suite], group_name="training", kinds={"pytorch", "parquet"})
def practice(context: AssetExecutionContext, storage: ObjectStore, warehouse: Warehouse,
             registry: ModelRegistry) -> MaterializeResult:
    import polars as pl

    from ..ml.curriculum import frontier
    from ..ml.hygiene import is_mined_holdout
    from ..ml.rl import coach, rollouts
    from ..ml.self_label import self_label
    from ..recipes.base import load_recipe

    settings = Settings()
    mix, recipe = settings.mix, load_recipe(settings.recipe)
    champion = registry.version(CHAMPION)
    if champion is None or not any(mix[s] for s in ("practice", "rl", "hint_distill", "self_label")):
        storage.write_json(layout.PRACTICE_LATEST, {"champion_version": None})
        return MaterializeResult(metadata={"status": "no champion yet" if champion is None else "turned off"})
    model = registry.load(champion.version, recipe)
    events = warehouse.query("SELECT count(*) AS n FROM feedback_events")["n"][0]
    retry = registry.candidates_since(champion.version)  # after a turned-down candidate, other problems
    key = f"{settings.seed}-{champion.version}-{events}" + (f"-retry{retry}" if retry else "")
    rng, seed = random.Random(f"practice-{key}"), registry.turn_seed(settings.seed, champion.version)
    k, temperature = settings.rollout_samples, settings.sample_temperature
    rows: list[dict] = []
    meta: dict = {"champion_version": str(champion.version), "retry": retry}

    problems: list[str] = []
    if mix["practice"] or mix["rl"] or mix["hint_distill"]:
        tiers, accuracy = frontier(recipe, model, rng, FRONTIER_PROBLEMS, settings.saturation)
        span = {skill: [t for t in recipe.tiers if 0 <= t - tier < settings.practice_tiers]
                for skill, tier in tiers.items()}
        problems = [t.prompt for skill in recipe.skills
                    for t in recipe.sample_tasks(rng, settings.practice_problems, [skill], span[skill])]
        meta |= {f"frontier {s}": t for s, t in tiers.items()}
        meta |= {f"accuracy {s}": round(a, 3) for s, a in accuracy.items()}
    # the champion's latest failures; those on the held-out side of the mined split are eval items, never practice
    down = warehouse.query("SELECT prompt FROM feedback_events WHERE model_version = ? AND rating = 'down' "
                           "ORDER BY ts DESC, event_id LIMIT ?", [str(champion.version), 4 * settings.failed_prompts])
    failed = list(dict.fromkeys(p for p in down["prompt"] if recipe.is_valid_prompt(p)
                                and not is_mined_holdout(recipe.prompt_hash(p), settings.mined_share)))
    failed = failed[:settings.failed_prompts]

    if mix["practice"]:  # harder tasks: keep the first sampled answer the verifier accepts
        for prompt, group in zip(problems, recipe.sample(model, problems, k, temperature, seed), strict=True):
            right = next((a for a in group if recipe.verify(prompt, a)[0] == 1), None)
            if right is not None:
                rows.append({"prompt": prompt, "target": right, "source": "practice"})
        meta["practice_solved"] = sum(r["source"] == "practice" for r in rows)
    if mix["rl"]:
        ro = rollouts(recipe, model, failed + problems, k, temperature, seed + 1)
        rows += [{**r, "source": "rl"} for r in ro.rows]
        meta |= {"rl_prompts": ro.prompts, "rl_informative_groups": ro.informative_groups,
                 "rl_solved_share": round(ro.solved_share, 4)}
    if mix["hint_distill"]:
        co = coach(recipe, model, failed + problems, temperature, seed + 2)
        rows += [{**r, "source": "hint_distill"} for r in co.rows]
        meta |= {"coach_failed": co.failed, "coach_hinted": co.hinted, "coach_solved_with_hint": co.solved_with_hint,
                 "coach_solved_without_hint": co.solved_without_hint}
        storage.write_json(layout.practice_failed(champion.version), {"prompts": co.failed_prompts})
    if mix["self_label"]:
        sl = self_label(recipe, model, rng, settings.self_label_problems, settings.self_label_votes, temperature,
                        settings.saturation, seed + 3, settings.practice_tiers)
        rows += [{**r, "source": "self_label"} for r in sl.rows]
        meta |= {"self_labels": len(sl.rows), **{f"self_labels {st}": n for st, n in sl.kept.items()}}

    frame = pl.DataFrame(rows, schema={"prompt": pl.String, "target": pl.String, "source": pl.String,
                                       "scale": pl.Float64, "reference": pl.String}
                         ).with_columns(pl.col("scale").fill_null(1.0))
    path = layout.practice_rows(champion.version, events)
    storage.write_parquet(path, frame)
    storage.write_json(layout.PRACTICE_LATEST, {"champion_version": str(champion.version), "rows": path})
    counts = {r["source"]: r["len"] for r in frame.group_by("source").len().to_dicts()}
    context.log.info(f"practice from champion v{champion.version}: {counts}")
    return MaterializeResult(metadata={**meta, **{f"rows_{s}": n for s, n in counts.items()}, "rows": len(frame)})
