"""What the eval suite's long end costs a cycle as the champion's reach grows: its growth, its horizon and edge
searches, and the candidate's evaluation of the slices they seal, at reaches doubling from the suite's top.

    python bench/long_end.py [--reaches 60,120,240,480] [--top 40] [--skill add] [--within 0.02]

The champion is the recipe's model answering every problem for real (the seconds are its decoding; an untrained
one decodes as long as a trained one) with its verdicts drawn from a reach: right at tiers up to R, then ever less
often (a logistic edge a twentieth of R wide), decided by the problem's text so both ways see the same champion.
The suite holds the arithmetic recipe's dense tiers 1..--top (make run ends near 40) and nothing past them: the
cycle after a champion jumped, the costliest. Each reach runs both ways in the same run: the searches halving to
the digit (before) and to within --within of the tier (the loop's way now, `curriculum.SEARCH_WITHIN`).

A bounded long end costs a cycle answer tokens in proportion to the reach (tokens per reach tier flat as it
doubles). Its seconds cannot be: a problem of t digits takes about t squared to decode (each token attends over the
whole problem), so one slice the gate counts at the reach already costs the square of the reach. The seconds are
therefore also given in slices at the reach (over what answering one such slice takes in the same run), which a
bounded long end keeps flat too.
"""

import argparse
import hashlib
import math
import os
import random
import time


class Champion:
    """`correct(tasks)` for suite_growth: the model decodes them (timed), the reach decides which are right."""

    def __init__(self, recipe, model, reach: dict[str, int]):
        self.recipe, self.model, self.reach = recipe, model, reach
        self.problems = self.tokens = 0
        self.seconds = 0.0

    def right(self, task) -> bool:
        reach = self.reach[task.skill]
        share = 1 / (1 + math.exp((task.tier - reach) / max(1.0, reach / 20)))
        draw = int.from_bytes(hashlib.sha256(task.prompt.encode()).digest()[:8], "big") / 2 ** 64
        return draw < share

    def __call__(self, tasks) -> list[bool]:
        started = time.perf_counter()
        self.recipe.answer(self.model, [t.prompt for t in tasks])
        self.seconds += time.perf_counter() - started
        self.problems += len(tasks)
        self.tokens += sum(t.tier + 1 for t in tasks)
        return [self.right(t) for t in tasks]


def cycle(recipe, model, reach: int, top: int, skill: str, settings) -> dict:
    """One cycle's long end: suite_growth from a suite of dense tiers 1..top, then the candidate (the same model)
    answering every item it sealed. The other skills hold tiers 1..3 and reach 1: nothing grows there."""
    from rmi_pipeline.ml.curriculum import suite_growth
    from rmi_pipeline.ml.tasks import Task

    suite = [vars(t) for t in recipe.build_eval_suite(
        random.Random(f"suite-{top}"), settings.evals.items_per_slice,
        {s: list(range(1, top + 1 if s == skill else 4)) for s in recipe.skills})]
    reaches = {s: reach if s == skill else 1 for s in recipe.skills}
    champion = Champion(recipe, model, reaches)
    new, added, _ = suite_growth(recipe, champion, suite, settings.saturation, settings.evals.lead,
                                 random.Random(f"grow-{reach}"), settings.evals.items_per_slice)
    candidate = Champion(recipe, model, reaches)
    candidate([Task(i["prompt"], i["answer"], i["skill"], int(i["tier"])) for i in new])
    return {"added": added.get(skill, []), "search": champion, "eval": candidate}


def at_reach(recipe, model, reach: int, skill: str, settings) -> float:
    """Seconds the model takes to answer one slice the gate counts at the reach: what any eval that sees the
    reach must pay (a problem of t digits costs about t squared: each token attends over the whole problem)."""
    from rmi_pipeline.ml.curriculum import measured_at

    tasks = recipe.build_eval_suite(random.Random(f"unit-{reach}"), measured_at(settings.evals.items_per_slice, reach),
                                    {s: [reach] if s == skill else [] for s in recipe.skills})
    started = time.perf_counter()
    recipe.answer(model, [t.prompt for t in tasks])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reaches", default="60,120,240,480", help="the champion's reaches, comma-separated")
    parser.add_argument("--top", type=int, default=40, help="the suite's top dense tier")
    parser.add_argument("--skill", default="add")
    parser.add_argument("--within", type=float, default=None, help="the loop's way (default: SEARCH_WITHIN)")
    args = parser.parse_args()

    import torch

    from rmi_pipeline.ml import curriculum
    from rmi_pipeline.recipes.base import load_recipe
    from rmi_pipeline.settings import Settings

    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    settings, recipe = Settings(), load_recipe("rmi_pipeline.recipes.arithmetic:ArithmeticRecipe")
    model = recipe.build_model(1e-3, 1).model.eval()
    within = curriculum.SEARCH_WITHIN if args.within is None else args.within
    print(f"suite tiers 1..{args.top} of {args.skill}, {settings.evals.items_per_slice} items a slice; "
          f"the searches to the digit (before) and within {within:.0%} (now)")
    print("| reach | way | tiers sealed past the top | problems searched | problems evaluated | answer tokens "
          "| seconds | tokens per reach tier | slices at the reach | vs the first reach: tokens, slices |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    first = {}
    for reach in (int(r) for r in args.reaches.split(",")):
        unit = at_reach(recipe, model, reach, args.skill, settings)
        for way, share in (("before", 0.0), ("now", within)):
            curriculum.SEARCH_WITHIN = share
            r = cycle(recipe, model, reach, args.top, args.skill, settings)
            seconds = r["search"].seconds + r["eval"].seconds
            tokens = r["search"].tokens + r["eval"].tokens
            slices = seconds / unit
            base = first.setdefault(way, (tokens / reach, slices))
            print(f"| {reach} | {way} | {' '.join(map(str, r['added']))} | {r['search'].problems:,} "
                  f"| {r['eval'].problems:,} | {tokens:,} | {seconds:.1f} | {tokens / reach:.0f} "
                  f"| {slices:.1f} | {tokens / reach / base[0]:.2f}, {slices / base[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
