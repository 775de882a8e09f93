"""The sealed eval suite. Only this asset and candidate_evaluation hold the eval store; training sees a manifest.

Four private sets: the curated anchor (frozen, comparable across cycles), the tiers the suite grew past it as the
champion did (versioned: each version holds its predecessor's items and the tiers it sealed), a refreshed set drawn
anew each cycle over every tier the suite holds (no model can have seen it), and the mined set (users' corrected
hard cases, held out by hash).
"""

import random
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from dagster import AssetExecutionContext, MaterializeResult, ResourceParam, asset

from ..ml.tasks import spans
from ..recipes.base import slice_name
from ..resources import layout
from ..resources.registry import CHAMPION, ModelRegistry
from ..resources.storage import ObjectStore
from ..resources.warehouse import Warehouse
from ..settings import Settings
from .feedback import feedback_events

MINED_PER_SKILL = 200  # the most recent hard cases per skill


def read_set(eval_store: ObjectStore, key: str) -> dict:
    """An eval set: {"version", "items": [{"prompt", "answer", "skill", "tier"}], ...}."""
    if not eval_store.exists(key):
        raise FileNotFoundError(f"no eval set at {eval_store.uri(key)}: curators must write the anchor suite first "
                                "(`rmi simulate` writes the default world's suite)")
    return eval_store.read_json(key)


def load_anchor(eval_store: ObjectStore) -> dict:
    """The curated suite, which also carries the leak marker (a string planted in its items)."""
    suite = read_set(eval_store, layout.ANCHOR)
    if not suite.get("items") or not suite.get("leak_marker"):
        raise ValueError(f"eval suite {eval_store.uri(layout.ANCHOR)} needs 'items' and a 'leak_marker'")
    return suite


def load_grown(eval_store: ObjectStore) -> dict:
    """The newest version of the grown tiers ({"version": None, "items": []} before the suite first grows)."""
    versions = eval_store.list(layout.GROWN)
    return eval_store.read_json(versions[-1]) if versions else {"version": None, "items": []}


def load_sets(eval_store: ObjectStore, manifest: dict) -> dict[str, list[dict]]:
    """The private sets a manifest names: anchor, grown, refreshed, mined."""
    grown = manifest.get("grown_version")
    return {"anchor": load_anchor(eval_store)["items"],
            "grown": read_set(eval_store, layout.grown(grown))["items"] if grown else [],
            "refreshed": read_set(eval_store, layout.refreshed(manifest["refreshed_version"]))["items"],
            "mined": read_set(eval_store, layout.mined(manifest["mined_version"]))["items"]}


def save_slice_scores(storage: ObjectStore, version, manifest: dict, scores: dict[str, float]) -> None:
    """A model's exact match per slice on the suite a manifest names, for champion_health to reuse."""
    suite = manifest["refreshed_version"]
    storage.write_json(layout.slice_scores(str(version), suite), {"version": str(version), "suite": suite,
                                                                  "scores": scores})


def remembered(recipe, registry: ModelRegistry, eval_store: ObjectStore, model_version):
    """A registered model (scoring.Remembered), with the eval items it answered before."""
    from ..ml.scoring import Remembered

    key = _answers_key(registry, model_version)
    known = eval_store.read_json(key)["right"] if eval_store.exists(key) else {}
    return Remembered(recipe, lambda: registry.load(model_version.version, recipe), known)


def remember(eval_store: ObjectStore, registry: ModelRegistry, model_version, memo, only_asked: bool = False) -> None:
    """Keeps what `memo` knows for the next evaluation; `only_asked`: only the items asked here (an evaluation asks
    the whole suite, so refreshed items of earlier cycles drop out and the file stays one suite's size)."""
    right = {k: v for k, v in memo.known.items() if k in memo.asked} if only_asked else memo.known
    if memo.decoded or len(right) < len(memo.known):
        eval_store.write_json(_answers_key(registry, model_version), {"version": str(model_version.version),
                                                                      "right": right})


def _answers_key(registry: ModelRegistry, model_version) -> str:
    return layout.answers(registry.model_name, str(model_version.version), model_version.run_id or "none")


def _grow(recipe, settings: Settings, eval_store: ObjectStore, registry: ModelRegistry, suite: list[dict],
          grown: dict) -> tuple[dict, dict, dict, float]:
    """(grown set, {skill: tiers sealed now}, {"skill/tier": champion's score}, seconds the champion spent
    answering the suite's edge): when the champion solves one of the
    suite's top RMI_EVAL_LEAD tiers of a skill, the next tiers are sealed into a new version of the grown set, as
    many as keep RMI_EVAL_LEAD of them past the highest it solves, and horizon slices past them when it still
    answers the hardest a quarter right. Once per cycle, not once per champion, so a champion the gate kept is
    followed a step further each cycle, and the cycle after a rejection is not held to the same reach."""
    from ..ml.curriculum import suite_growth

    champion = registry.version(CHAMPION)
    if champion is None:
        return grown, {}, {}, 0.0
    version = f"{len(eval_store.list(layout.GROWN)) + 1:04d}"
    memo = remembered(recipe, registry, eval_store, champion)
    started = time.perf_counter()
    new, added, scores = suite_growth(recipe, memo.correct, suite, settings.saturation, settings.evals.lead,
                                      random.Random(f"grow-{settings.seed}-{version}"), settings.evals.items_per_slice)
    seconds = time.perf_counter() - started
    remember(eval_store, registry, champion, memo)
    if added:
        grown = {"version": version, "grew_from": grown["version"], "champion_version": str(champion.version),
                 "added": added, "items": grown["items"] + new}
        eval_store.write_json(layout.grown(version), grown)
    return grown, added, scores, seconds


@asset(deps=[feedback_events], group_name="evals", kinds={"json"})
def eval_suite(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
               eval_store: ObjectStore, warehouse: Warehouse, registry: ModelRegistry) -> MaterializeResult:
    """Grows, refreshes and mines the private eval sets in the sealed eval store (the next tiers sealed before the
    champion saturates the top ones, a fresh set drawn each cycle, users' corrected hard cases held out by hash),
    then publishes what training may know (evals/manifest.json): item hashes, slice sizes and the leak marker,
    never the items."""
    from ..ml.curriculum import horizon_problems
    from ..ml.hygiene import ngram_hashes
    from ..recipes.base import load_recipe

    recipe = load_recipe(settings.recipe)
    anchor = load_anchor(eval_store)
    grown = load_grown(eval_store)
    grown, added, champion_scores, growth_seconds = _grow(recipe, settings, eval_store, registry,
                                                          anchor["items"] + grown["items"], grown)
    suite = anchor["items"] + grown["items"]
    tiers = {skill: sorted({int(i["tier"]) for i in suite if i["skill"] == skill}) for skill in recipe.skills}
    # a horizon slice is sealed whole; the refreshed set draws it afresh, counted by the rule it was sealed by
    dense = {(i["skill"], int(i["tier"])) for i in suite if not i.get("horizon")}
    horizon = {(s, t) for s, ts in tiers.items() for t in ts if (s, t) not in dense}
    edge = {(i["skill"], int(i["tier"])) for i in suite if i.get("edge")}  # at the champion's reach when sealed
    far = {(i["skill"], int(i["tier"])) for i in suite if i.get("far")}
    # the n-th refresh of a seed is drawn the same way every time, so the same seed gives the same loop
    drawn = len(eval_store.list(layout.REFRESHED))
    stamp = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{drawn}"
    rng = random.Random(f"refresh-{settings.seed}-{drawn}")
    refreshed = [vars(t) for t in recipe.build_eval_suite(
        rng, settings.evals.refreshed_items_per_slice,
        {s: [t for t in ts if (s, t) in dense] for s, ts in tiers.items()})]
    refreshed += [vars(t) for s, t in sorted(horizon) for t in recipe.build_eval_suite(
        rng, horizon_problems(settings.evals.refreshed_items_per_slice, t, (s, t) in far),
        {k: [t] if k == s else [] for k in recipe.skills})]
    eval_store.write_json(layout.refreshed(stamp), {"version": stamp, "items": refreshed})

    mined = _mined(recipe, warehouse, settings.evals.mined_share)
    eval_store.write_json(layout.mined(stamp), {"version": stamp, "items": mined})

    counts: dict[tuple[str, int], int] = {}
    for item in suite:
        counts[(item["skill"], item["tier"])] = counts.get((item["skill"], item["tier"]), 0) + 1
    slices = [{"skill": s, "tier": t, "items": n, "private": recipe.is_private_slice(s, t, n),
               "horizon": (s, t) in horizon, "edge": (s, t) in edge} for (s, t), n in sorted(counts.items())]
    private = {(s["skill"], s["tier"]) for s in slices if s["private"]}
    # Slices too small to keep private (every problem is one a user will ask) are scored but not counted,
    # so training on their problems is no leak.
    sealed = [i for i in suite + refreshed if (i["skill"], i["tier"]) in private] + mined
    ngram_n = settings.evals.ngram_n or recipe.ngram_n
    manifest = {
        "version": anchor["version"], "grown_version": grown["version"], "refreshed_version": stamp,
        "mined_version": stamp,
        "leak_marker": anchor["leak_marker"], "mined_share": settings.evals.mined_share,
        "hashes": sorted({recipe.prompt_hash(i["prompt"]) for i in sealed}),
        "ngram_n": ngram_n,
        "ngram_hashes": sorted({h for i in sealed for h in ngram_hashes(i["prompt"], ngram_n)})
        if recipe.text_recipe else [],
        "slices": slices,
        "sets": {"anchor": len(anchor["items"]), "grown": len(grown["items"]), "refreshed": len(refreshed),
                 "mined": len(mined)},
    }
    storage.write_json(layout.EVAL_MANIFEST, manifest)
    held = ", ".join(f"{skill} {spans(ts)}" for skill, ts in tiers.items())
    if added:
        context.log.info("the champion's scores at the suite's edge ("
                         + ", ".join(f"{name} {v:.2f}" for name, v in champion_scores.items()) + "): sealed "
                         + ", ".join(f"{skill} {spans(ts)}" for skill, ts in added.items())
                         + f" as grown v{grown['version']}")
    context.log.info(f"eval suite {anchor['version']}: {manifest['sets']}, {len(manifest['hashes'])} sealed hashes")
    return MaterializeResult(metadata={
        "anchor_version": anchor["version"], "grown_version": grown["version"] or "none", "tiers": held,
        "tiers_sealed_now": ", ".join(f"{skill} {spans(ts)}" for skill, ts in added.items()) or "none",
        "horizon_slices": ", ".join(slice_name(s, t) for s, t in sorted(horizon)) or "none",
        "edge_slices": ", ".join(slice_name(s, t) for s, t in sorted(edge)) or "none",
        **{f"champion {name}": round(v, 3) for name, v in champion_scores.items()},
        "refreshed_version": stamp, **manifest["sets"],
        "growth_compute_seconds": round(growth_seconds, 3),  # the champion answering the suite's edge
        "private_slices": len(private), "sealed_hashes": len(manifest["hashes"]),
        "excluded_slices": ", ".join(slice_name(s["skill"], s["tier"]) for s in slices if not s["private"]) or "none",
    })


def _mined(recipe, warehouse: Warehouse, share: float, now: datetime | None = None) -> list[dict]:
    """Users' corrected hard cases on the held-out side of the split (by hash), newest first, up to MINED_PER_SKILL
    per skill, checked in bulk with the recipe's batch forms; only the few candidates go through the verifier
    (users can be wrong: only corrections it accepts become eval items). The corrections are read a time window
    at a time, the last day first, widening until every skill has its share: a window reads only the lake's files
    whose events fall in it, so a long history is neither read whole nor sorted."""
    import polars as pl

    from ..ml.hygiene import canonical_hashes, mined_holdout

    mined, seen, per_skill = [], set(), Counter()
    corrections = warehouse.stream(
        "SELECT prompt, correction FROM feedback_events WHERE rating = 'down' AND correction IS NOT NULL "
        f"AND {span} ORDER BY ts DESC, event_id" for span in _windows(now or datetime.now(UTC)))
    for chunk in corrections:
        parsed = recipe.parse_prompts(chunk["prompt"])
        usable = chunk.hstack(parsed.get_columns()).filter(
            parsed["valid"] & recipe.valid_completions(chunk["correction"]))
        held = usable.with_columns(digest=canonical_hashes(usable["canonical"])).filter(
            mined_holdout(pl.col("digest"), share))
        for prompt, answer, digest, skill, tier in held.select("prompt", "correction", "digest", "skill",
                                                               "tier").iter_rows():
            if digest in seen or per_skill[skill] >= MINED_PER_SKILL or recipe.verify(prompt, answer)[0] < 1:
                continue
            per_skill[skill] += 1
            seen.add(digest)
            mined.append({"prompt": prompt, "answer": answer, "skill": skill, "tier": tier})
        if all(per_skill[s] >= MINED_PER_SKILL for s in recipe.skills):
            corrections.close()  # every skill has its share: the older corrections are not read
            break
    return mined


def _windows(now: datetime):
    """The mined set's time windows as SQL conditions, newest first: the last day, week, month and year, then the
    rest (ts is never null in the warehouse: the suite quarantines such rows)."""
    upper = None
    for lower in [now - timedelta(days=days) for days in (1, 7, 30, 365)] + [None]:
        yield " AND ".join([f"ts {op} '{bound.isoformat()}'" for op, bound in ((">=", lower), ("<", upper))
                            if bound is not None])
        upper = lower
