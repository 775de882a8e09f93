"""The sealed eval suite: curated elsewhere, opened only here and in evaluation; it publishes hashes only."""


import hashlib
import json

from dagster import AssetExecutionContext, MaterializeResult, asset

from .. import layout
from ..resources.storage import ObjectStore
from ..settings import Settings


def load_suite(storage: ObjectStore) -> dict:
    """The private suite: {"version", "canary", "items": [{"prompt", "answer", "skill", "tier"}]}."""
    if not storage.exists(layout.EVAL_SUITE):
        raise FileNotFoundError(
            f"no eval suite at {storage.uri(layout.EVAL_SUITE)}: curators must write one first "
            "(`rmi simulate` writes the default world's suite)")
    suite = storage.read_json(layout.EVAL_SUITE)
    if not suite.get("items") or not suite.get("canary"):
        raise ValueError(f"eval suite {storage.uri(layout.EVAL_SUITE)} needs 'items' and a 'canary'")
    return suite


@asset(group_name="evals", kinds={"json"})
def eval_suite(context: AssetExecutionContext, storage: ObjectStore) -> MaterializeResult:
    """Publish what training may know of the suite: item hashes, slice sizes, the canary, a version."""
    from ..recipes.base import load_recipe

    recipe = load_recipe(Settings().recipe)
    suite = load_suite(storage)
    counts: dict[tuple[str, int], int] = {}
    for item in suite["items"]:
        counts[(item["skill"], item["tier"])] = counts.get((item["skill"], item["tier"]), 0) + 1
    slices = [{"skill": s, "tier": t, "items": n, "private": recipe.is_private_slice(s, t, n)}
              for (s, t), n in sorted(counts.items())]
    private = {(s["skill"], s["tier"]) for s in slices if s["private"]}
    # Slices too small to keep private (every problem is one a user will ask) are scored but not
    # counted in the headline metric, so training on their problems is no leak.
    hashes = sorted({recipe.prompt_hash(item["prompt"]) for item in suite["items"]
                     if (item["skill"], item["tier"]) in private})
    manifest = {
        "version": suite.get("version") or hashlib.sha256(json.dumps(suite, sort_keys=True).encode()).hexdigest()[:12],
        "canary": suite["canary"],
        "hashes": hashes,
        "slices": slices,
    }
    storage.write_json(layout.EVAL_MANIFEST, manifest)
    return MaterializeResult(metadata={
        "version": manifest["version"], "items": len(suite["items"]), "slices": len(slices),
        "private_slices": len(private), "private_item_hashes": len(hashes),
        "excluded_slices": ", ".join(f"{s['skill']}/{s['tier']}" for s in slices if not s["private"]) or "none",
    })
