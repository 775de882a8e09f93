"""The world the loop improves against: a serving process answers users, whose feedback lands as files."""

import json
import random
from datetime import UTC, datetime

from ..recipes.base import load_recipe
from ..resources import build_resources, layout
from ..resources.registry import CHAMPION
from ..settings import Settings
from .curators import curate_eval_suite
from .users import Drift, Reactions, questions, react


class World:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.recipe = load_recipe(settings.recipe)
        resources = build_resources(settings)
        self.storage, self.registry = resources["storage"], resources["registry"]
        self.eval_store = resources["eval_store"]

    def ensure_eval_suite(self) -> bool:
        """Curators write the suite once; returns True when they had to."""
        if self.eval_store.exists(layout.ANCHOR):
            return False
        curate_eval_suite(self.eval_store, self.recipe, self.settings.eval_items_per_slice, self.settings.seed)
        return True

    def serve_cycle(self, cycle: int) -> tuple[str, dict]:
        """Users query the champion, as production serves it, and one feedback batch lands.

        Returns the batch's key and what happened (queries, champion accuracy on them, reactions)."""
        return self.serve(cycle, random.Random(f"users-{self.settings.seed}-{cycle}"), f"cycle{cycle:03d}")

    def serve(self, cycle: int, rng: random.Random, prefix: str, drift: Drift | None = None) -> tuple[str, dict]:
        """One batch of users of `cycle`, some of them moved to a drifted slice; lands as `<prefix>-<time>.jsonl`."""
        s = self.settings
        champion = self.registry.version(CHAMPION)
        if champion is None:
            raise RuntimeError("no champion is serving yet: run a first improvement cycle")
        model = self.registry.load(CHAMPION, self.recipe)
        tasks = questions(rng, self.recipe, s.sim_queries_per_cycle, cycle, drift)
        answers = self.recipe.answer(model, [t.prompt for t in tasks])
        reactions = Reactions(s.sim_wrong_user_share, s.sim_correction_share)
        events = [react(rng, t, a, str(champion.version), reactions) for t, a in zip(tasks, answers, strict=True)]
        lines = [json.dumps(e) for e in events]
        garbled = 0
        for i in range(len(lines)):  # a buggy client now and then
            if rng.random() < s.sim_malformed_share:
                lines[i] = lines[i][: rng.randrange(1, len(lines[i]))]
                garbled += 1
        name = f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%S}.jsonl"
        self.storage.write_bytes(layout.incoming(name), ("\n".join(lines) + "\n").encode())
        right = [a == t.answer for t, a in zip(tasks, answers, strict=True)]
        stats = {
            "queries": len(events), "champion_version": champion.version,
            "served_accuracy": sum(right) / len(tasks),
            "up": sum(e["rating"] == "up" for e in events), "down": sum(e["rating"] == "down" for e in events),
            "corrections": sum(e["correction"] is not None for e in events), "garbled": garbled,
        }
        if drift is not None:
            on_slice = [ok for t, ok in zip(tasks, right, strict=True) if t.slice == drift.slice]
            stats |= {"drift_queries": len(on_slice), "drift_accuracy": sum(on_slice) / max(1, len(on_slice))}
        return name, stats
