"""Curators build the private anchor suite once, into the sealed eval store: labelled, every slice filled,
marked with a leak marker (a string that, found in training data, means the evals leaked)."""

import random
import uuid
from datetime import UTC, datetime

from ..resources import layout


def curate_eval_suite(eval_store, recipe, items_per_slice: int, seed: int) -> dict:
    rng = random.Random(f"curators-{seed}")
    items = recipe.build_eval_suite(rng, items_per_slice)
    suite = {
        "version": f"suite-{datetime.now(UTC):%Y%m%d}-{seed}", "curated_by": layout.SIMULATED_CURATORS,
        "leak_marker": f"RMI-EVAL-LEAK-MARKER {uuid.UUID(int=rng.getrandbits(128))}",
        "items": [{"prompt": t.prompt, "answer": t.answer, "skill": t.skill, "tier": t.tier} for t in items],
    }
    eval_store.write_json(layout.ANCHOR, suite)
    return suite
