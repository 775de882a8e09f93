"""The sealed eval suite. Only this asset and candidate_evaluation hold the eval store; training sees a manifest.

Four private sets: the curated anchor (frozen, comparable across cycles), the tiers the suite grew past it as the
champion did (versioned: each version holds its predecessor's items and the tiers it sealed), a refreshed set drawn
anew each cycle over every tier the suite holds (no model can have seen it), and the mined set (users' corrected
hard cases, held out by hash).
"""

import hashlib
import random
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, ResourceParam, asset

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


def remembered(recipe, registry: ModelRegistry, eval_store: ObjectStore, model_version, scorer=None):
    """A registered model (scored.Remembered), with its scores on the eval items it answered before under the same
    scorer (another scorer's, or another rubric's, are not reused)."""
    from ..ml.scored import Remembered

    key = _answers_key(registry, model_version)
    saved = eval_store.read_json(key) if eval_store.exists(key) else {}
    known = saved.get("scores", saved.get("right", {})) if saved.get("scorer", "exact") == scorer_id(scorer) else {}
    return Remembered(recipe, lambda: registry.load(model_version.version, recipe), known, scorer)


def remember(eval_store: ObjectStore, registry: ModelRegistry, model_version, memo, only_asked: bool = False) -> None:
    """Keeps what `memo` knows for the next evaluation; `only_asked`: only the items asked here (an evaluation asks
    the whole suite, so refreshed items of earlier cycles drop out and the file stays one suite's size)."""
    scores = {k: v for k, v in memo.known.items() if k in memo.asked} if only_asked else memo.known
    if memo.decoded or len(scores) < len(memo.known):
        eval_store.write_json(_answers_key(registry, model_version), {"version": str(model_version.version),
                                                                      "scorer": scorer_id(memo.scorer),
                                                                      "scores": scores})


def eval_scorer(settings: Settings, eval_store: ObjectStore):
    """How an answer is scored (RMI_EVAL_SCORER): None for exact match, which the recipe's own comparison gives;
    a judge keeps its verdicts in the sealed eval store (they quote eval items), so none is asked for twice."""
    from ..scoring.scorers import load_scorer

    if settings.evals.scorer == "exact":
        return None
    cache = eval_store.read_json(layout.JUDGE_CACHE) if settings.evals.scorer == "judge" and eval_store.exists(
        layout.JUDGE_CACHE) else {}
    return load_scorer(settings.evals.scorer, settings.judge, cache=cache)


def keep_verdicts(eval_store: ObjectStore, scorer) -> dict:
    """The judge's new verdicts written back to the eval store; its calls, cache hits and cost, for the UI ({} for
    another scorer)."""
    if scorer is None or not hasattr(scorer, "usage"):
        return {}
    usage = scorer.usage()
    if usage["calls"]:
        eval_store.write_json(layout.JUDGE_CACHE, dict(scorer.cache))
    return {f"judge_{k}": round(v, 6) if isinstance(v, float) else v for k, v in usage.items()}


def scorer_id(scorer) -> str:
    """What a remembered score was scored by: the scorer's name (a judge's also names its model and rubric)."""
    return "exact" if scorer is None else getattr(scorer, "identity", scorer.name)


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
    new, added, scores = suite_growth(recipe, memo.scores, suite, settings.saturation, settings.evals.lead,
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
    from ..recipes.base import load_recipe

    recipe = load_recipe(settings.recipe)
    if settings.evals.files:
        return file_suite(context, recipe, settings, storage, eval_store, warehouse)
    if not recipe.has("generator"):
        raise ValueError(f"the {recipe.name} recipe makes no tasks, so there is no eval suite to generate: set "
                         "RMI_EVAL_FILES to your eval files (docs/how-to/your-task-and-eval.md)")
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

    mined = _mined(recipe, warehouse, settings.evals.mined_share) if recipe.has("verifier") else []
    eval_store.write_json(layout.mined(stamp), {"version": stamp, "items": mined})

    counts: dict[tuple[str, int], int] = {}
    for item in suite:
        counts[(item["skill"], item["tier"])] = counts.get((item["skill"], item["tier"]), 0) + 1
    slices = [{"skill": s, "tier": t, "items": n, "private": recipe.is_private_slice(s, t, n),
               "horizon": (s, t) in horizon, "edge": (s, t) in edge} for (s, t), n in sorted(counts.items())]
    manifest = publish(storage, recipe, settings, anchor, grown["version"], suite, (stamp, refreshed),
                       (stamp, mined), slices)
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
        "private_slices": sum(s["private"] for s in slices), "sealed_hashes": len(manifest["hashes"]),
        "excluded_slices": ", ".join(slice_name(s["skill"], s["tier"]) for s in slices if not s["private"]) or "none",
    })


def file_suite(context: AssetExecutionContext, recipe, settings: Settings, storage: ObjectStore,
               eval_store: ObjectStore, warehouse: Warehouse) -> MaterializeResult:
    """The team's eval files as the suite: sealed once per content of the files (their counted part as the anchor,
    the held-out part frozen beside it as the set no person looks at), slices from their metadata; a file the
    reader refuses fails the asset before anything is written. There is no growth or fresh draw without a
    generator of tasks, and no mined set without a verifier to check users' corrections."""
    anchor, held_out, sealed_now = seal_eval_files(recipe, settings, eval_store)
    version = anchor["version"]
    has_verifier = recipe.has("verifier")
    mined = _mined(recipe, warehouse, settings.evals.mined_share) if has_verifier else []
    stamp = f"{version}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    eval_store.write_json(layout.mined(stamp), {"version": stamp, "items": mined})
    counts = Counter(i["skill"] for i in anchor["items"] + held_out["items"])
    slices = [{"skill": name, "tier": None, "items": n, "private": True, "horizon": False, "edge": False}
              for name, n in sorted(counts.items())]
    manifest = publish(storage, recipe, settings, anchor, None, anchor["items"], (version, held_out["items"]),
                       (stamp, mined), slices)
    context.log.info(f"eval suite {version} from {len(anchor['files'])} eval file(s)"
                     f"{' (sealed now)' if sealed_now else ''}: {manifest['sets']}")
    return MaterializeResult(metadata={
        "anchor_version": version, "source": "the team's eval files", "sealed_now": sealed_now,
        "files": MetadataValue.md("\n".join(f"- {f['url']}: {f['rows']} rows, sha256 {f['sha256'][:12]}"
                                             for f in anchor["files"])),
        "slices": ", ".join(f"{name} ({n})" for name, n in sorted(counts.items())),
        "counted_items": len(anchor["items"]), "held_out_items": len(held_out["items"]), "mined": len(mined),
        "sealed_hashes": len(manifest["hashes"]),
        "skipped": "; ".join(["suite growth and fresh draws: the team's files are the suite"]
                             + ([] if has_verifier else ["mined hard cases: no verifier to check users' corrections"])),
    })


def seal_eval_files(recipe, settings: Settings, eval_store: ObjectStore) -> tuple[dict, dict, bool]:
    """(anchor, held-out set, whether they were sealed now): the files read, checked and split by
    schema.eval_files, each input checked against the recipe too, then written; the same files seal to the same
    version, so a cycle reuses them, and changed files seal a new version."""
    from ..schema.eval_files import EvalFileError, Problem, read_eval_files
    from ..scoring.scorers import BUILT_INS

    endpoint = settings.storage.s3_endpoint_url
    files = read_eval_files(settings.evals.files, slice_by=settings.evals.slice_by,
                            min_slice_items=settings.evals.min_slice_items,
                            held_out_share=settings.evals.held_out_share,
                            storage_options={"endpoint_url": endpoint} if endpoint else None)
    scorer = settings.evals.scorer
    needs_target = scorer in BUILT_INS and BUILT_INS[scorer].needs_target  # a judge, or a team's own, may not
    refused = []
    for item in files.items:
        file, line = item.source.rsplit(":", 1)
        if not recipe.is_valid_prompt(item.input):
            refused.append(Problem(file, int(line), "input", "not a prompt this recipe's model can be asked"))
        if needs_target and item.target is None:
            refused.append(Problem(file, int(line), "target", f"missing, and the {scorer} scorer (RMI_EVAL_SCORER) "
                                   "compares with one"))
    if refused:
        raise EvalFileError(refused)
    digest = hashlib.sha256("".join(f["sha256"] for f in files.files).encode()
                            + repr((settings.evals.slice_by, settings.evals.held_out_share)).encode()).hexdigest()
    version = f"files-{digest[:12]}"
    if eval_store.exists(layout.ANCHOR):
        anchor = eval_store.read_json(layout.ANCHOR)
        if anchor.get("version") == version and eval_store.exists(layout.refreshed(version)):
            return anchor, eval_store.read_json(layout.refreshed(version)), False

    def item(i) -> dict:
        return {"prompt": i.input, "answer": i.target, "skill": i.slice, "tier": None, "metadata": i.metadata,
                "source": i.source}

    held_out = {"version": version, "items": [item(i) for i in files.items if i.held_out]}
    anchor = {"version": version, "curated_by": "eval files", "files": files.files,
              "leak_marker": f"RMI-EVAL-LEAK-MARKER {uuid.UUID(bytes=bytes.fromhex(digest[:32]))}",
              "items": [item(i) for i in files.items if not i.held_out]}
    eval_store.write_json(layout.refreshed(version), held_out)  # the anchor last: its version says both are there
    eval_store.write_json(layout.ANCHOR, anchor)
    return anchor, held_out, True


def publish(storage: ObjectStore, recipe, settings: Settings, anchor: dict, grown_version: str | None,
            suite: list[dict], refreshed: tuple[str, list[dict]], mined: tuple[str, list[dict]],
            slices: list[dict]) -> dict:
    """What training may know of the sealed sets (evals/manifest.json): item hashes, n-gram hashes for text
    recipes, slice sizes and the leak marker, never the items. Slices too small to keep private (every problem is
    one a user will ask) are scored but not counted, so training on their problems is no leak."""
    from ..ml.hygiene import ngram_hashes

    (refreshed_version, refreshed), (mined_version, mined) = refreshed, mined
    private = {(s["skill"], s["tier"]) for s in slices if s["private"]}
    sealed = [i for i in suite + refreshed if (i["skill"], i["tier"]) in private] + mined
    ngram_n = settings.evals.ngram_n or recipe.ngram_n
    manifest = {
        "version": anchor["version"], "grown_version": grown_version, "refreshed_version": refreshed_version,
        "mined_version": mined_version, "leak_marker": anchor["leak_marker"],
        "mined_share": settings.evals.mined_share,
        "hashes": sorted({recipe.prompt_hash(i["prompt"]) for i in sealed}),
        "ngram_n": ngram_n,
        "ngram_hashes": sorted({h for i in sealed for h in ngram_hashes(i["prompt"], ngram_n)})
        if recipe.text_recipe else [],
        "slices": slices,
        "sets": {"anchor": len(anchor["items"]), "grown": len(suite) - len(anchor["items"]),
                 "refreshed": len(refreshed), "mined": len(mined)},
    }
    storage.write_json(layout.EVAL_MANIFEST, manifest)
    return manifest


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
