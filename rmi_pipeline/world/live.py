"""The world live: users keep asking the current champion, and a feedback batch lands every interval.

    rmi simulate --live [--interval 60] [--scenario drift|partner] [--scenario-after 2] [--batches N]

With the drift scenario, after `scenario_after` batches half of the users move to one slice the serving champion
barely knows: the easiest slice above the tiers users asked so far on which it is right less than half the time.
The world picks it by testing the champion, as a product team would notice a new kind of question; the pipeline
only ever sees the feedback.

With the partner scenario, after `scenario_after` batches a partner app's users ask a fifth of the questions
(Recipe.partner_task: arithmetic on round amounts) and its buggy client sends a wrong correction with every rating.
A model that learns those corrections passes the offline gate (an eval drawn at random barely holds such
questions) and is worse for the partner's users: the world that fools the gate, for the canary to catch.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from ..resources.registry import CHAMPION
from .users import Drift, usual_tiers
from .world import World

DRIFT_SHARE = 0.5
PARTNER_SHARE = 0.2
BARELY = 0.5  # the champion "barely knows" a slice it gets right less often than this
PROBES = 200  # problems per slice the world tries the champion on to choose the drift


def choose_drift(world: World, cycle: int, share: float = DRIFT_SHARE) -> Drift:
    """The easiest slice above the usual tiers that the champion barely knows (else the one it knows least): the
    product team tries the slices through the gateway, as any client would, easiest tier first, and stops at the
    first tier it finds one barely known (the curated tiers go to 16 digits: trying them all would be 4,400
    questions)."""
    recipe = world.recipe
    rng = random.Random(f"drift-{world.settings.seed}")
    asked = set(usual_tiers(recipe, cycle))
    tiers = [t for t in recipe.tiers if t not in asked] or list(recipe.tiers)
    scored = []
    for tier in sorted(tiers):
        for skill in recipe.skills:
            tasks = recipe.sample_tasks(rng, PROBES, [skill], [tier])
            answers = world.ask([t.prompt for t in tasks], user_id="product-team")
            scored.append((sum(a == t.answer for a, t in zip(answers, tasks, strict=True)) / len(tasks), tier, skill))
        barely = [s for s in scored if s[1] == tier and s[0] < BARELY]
        if barely:
            accuracy, tier, skill = min(barely)
            return Drift(skill, tier, share, accuracy)
    accuracy, tier, skill = min(scored)
    return Drift(skill, tier, share, accuracy)


def run_live(world: World, *, interval: float, cycle: int, batches: int | None, stop: threading.Event,
             say: Callable[[str], None], scenario: str = "steady", scenario_after: int = 0) -> int:
    """Land batches until `stop` is set (Ctrl-C) or `batches` have landed; returns how many landed."""
    started = f"{datetime.now(UTC):%Y%m%dT%H%M%S}"  # a restart draws new users, not the same ones again
    drift, partner, landed = None, 0.0, 0
    say(f"live world: users of cycle {cycle} ask up to tier {max(usual_tiers(world.recipe, cycle))}; a batch "
        f"of {world.settings.simulation.queries_per_cycle} questions every {interval:g} s"
        + (f"; {scenario} after {scenario_after} batches" if scenario != "steady" else "") + " (Ctrl-C stops)")
    while not stop.is_set() and (batches is None or landed < batches):
        if scenario == "drift" and drift is None and landed >= scenario_after:
            drift = choose_drift(world, cycle)
            say(f"{_now()} drift: {drift.share:.0%} of users now ask {drift.slice}, where champion "
                f"v{world.registry.version(CHAMPION).version} is right {drift.accuracy:.0%} of the time")
        if scenario == "partner" and not partner and landed >= scenario_after:
            partner = PARTNER_SHARE
            say(f"{_now()} partner: {partner:.0%} of questions now come from a partner app whose client sends a "
                "wrong correction with every rating")
        rng = random.Random(f"users-{world.settings.seed}-{cycle}-live-{started}-{landed}")
        names, stats = world.serve(cycle, rng, drift, partner)
        landed += 1
        on_drift = (f" ({drift.slice}: {stats['drift_queries']} asked, right {stats['drift_accuracy']:.0%})"
                    if drift else "")
        if partner:
            on_drift += f" (partner: {stats['partner_queries']} asked, right {stats['partner_accuracy']:.0%})"
        say(f"{_now()} batch {landed}: {stats['queries']} questions ({_arms(stats)}), "
            f"right {stats['served_accuracy']:.0%}{on_drift}; {stats['rated']} rated, {stats['down']} thumbs-down, "
            f"{stats['corrections']} corrections, {sum(stats['implicit'].values())} implicit signals "
            f"-> {', '.join(names) or 'no batch'}")
        if batches is not None and landed >= batches:
            break
        stop.wait(interval)
    say(f"{_now()} live world stopped after {landed} batches")
    return landed


def _arms(stats: dict) -> str:
    """Who answered and how often the thumbs that users turned were down: "v3 2,000 (14% of 200 rated down)"."""
    return ", ".join(f"v{v} {n:,} ({stats['down_by_version'][v] / max(1, stats['rated_by_version'][v]):.0%} of "
                     f"{stats['rated_by_version'][v]:,} rated down)"
                     for v, n in sorted(stats["versions"].items(), key=lambda kv: int(kv[0])))


def _now() -> str:
    return f"[{datetime.now():%H:%M:%S}]"
