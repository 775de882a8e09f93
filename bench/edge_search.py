"""The cost of finding a champion's edge past the eval suite: to the digit, every probe whole (the baseline), against
within SEARCH_WITHIN, each probe asked in LOOKS parts (the loop's way), same run, same champion.

    python bench/edge_search.py --home DIR [--version N] [--skills add,sub] [--above add=34,sub=30] [--repeats 3]

Self-labelling finds the first tier past the suite's top where the champion stops agreeing with itself
(ml/self_label.py), probing 30 problems of ever longer tiers, each answered greedily and by its votes. In a climb's
long cycles that search, not the labels, was most of practice. DIR is a kept loop home with long-reaching
champions, e.g. `python bench/climb.py --modes verifier --cycles 4 --keep /tmp/climbv` gives /tmp/climbv/verifier;
--version picks a model version there (default: the champion), --above the suite's top tier per skill that the
search starts past (default: the home's eval suite now; give the one the version practised under).
"""

import argparse
import os
import random
import sys
import time


class Counting:
    """The recipe, counting the problems the model answers greedily (each asked once per probe)."""

    def __init__(self, recipe):
        self.recipe, self.asked = recipe, 0

    def __getattr__(self, name):
        return getattr(self.recipe, name)

    def answer(self, model, prompts):
        self.asked += len(prompts)
        return self.recipe.answer(model, prompts)


def search(recipe, model, skill: str, above: int, settings, looks: int, within: float, repeat: int) -> dict:
    """The edge past `above` one way: the tier found, the tiers probed, the problems asked and the seconds."""
    from rmi_pipeline.ml.curriculum import first_unsolved, measured_at
    from rmi_pipeline.ml.self_label import agreement_at

    counting, rng, probed = Counting(recipe), random.Random(f"edge-{skill}-{repeat}"), []

    def reliable(tier: int) -> bool:
        share = agreement_at(counting, model, rng, skill, tier, measured_at(100, tier), repeat,
                             votes=settings.self_labelling.votes, temperature=settings.sampling.temperature,
                             saturation=settings.saturation, looks=looks)
        probed.append(f"{tier}{'' if share >= settings.saturation else 'x'}")
        return share >= settings.saturation

    started = time.perf_counter()
    edge = first_unsolved(reliable, above + 1, recipe.hardest_tier, within=within)
    return {"edge": edge, "probed": probed, "asked": counting.asked, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", required=True, help="a kept loop home (RMI_HOME)")
    parser.add_argument("--version", help="the model version (default: the champion)")
    parser.add_argument("--skills", help="comma-separated (default: every skill of the recipe)")
    parser.add_argument("--above", default="", help="skill=tier,...: where the suite's top stood")
    parser.add_argument("--repeats", type=int, default=3, help="searches each way, each with its own problems and "
                        "votes: near the edge a tier is a coin flip that can send the two ways apart")
    args = parser.parse_args()
    if not os.path.isdir(args.home):
        sys.exit(f"no loop home at {args.home}: keep one with bench/climb.py --keep")
    os.environ["RMI_HOME"] = args.home

    import torch

    from rmi_pipeline.ml.curriculum import LOOKS, SEARCH_WITHIN, reach
    from rmi_pipeline.recipes.base import load_recipe
    from rmi_pipeline.resources import build_resources, layout
    from rmi_pipeline.settings import Settings

    torch.set_num_threads(os.cpu_count() or 1)
    settings = Settings()
    resources, recipe = build_resources(settings), load_recipe(settings.recipe)
    version = args.version or resources["registry"].version("champion").version
    model = resources["registry"].load(version, recipe)
    above = reach(recipe, resources["storage"].read_json(layout.EVAL_MANIFEST)["slices"])
    above |= {skill: int(tier) for skill, tier in (kv.split("=") for kv in args.above.split(",") if kv)}
    print(f"model v{version} of {args.home}; searching past {above}; {settings.self_labelling.votes} votes a problem")
    print("| skill | repeat | way | edge | tiers probed (x: not reliable) | problems asked | s | time ratio |")
    print("|---|---|---|---|---|---|---|---|")
    seconds, ways = {"base": 0.0, "now": 0.0}, {"base": "to the digit, whole probes",
                                                "now": f"within {SEARCH_WITHIN:.0%}, in {LOOKS} parts"}
    for skill in (args.skills.split(",") if args.skills else recipe.skills):
        for repeat in range(args.repeats):
            base = search(recipe, model, skill, above[skill], settings, 1, 0.0, repeat)
            now = search(recipe, model, skill, above[skill], settings, LOOKS, SEARCH_WITHIN, repeat)
            for way, r in (("base", base), ("now", now)):
                seconds[way] += r["seconds"]
                print(f"| {skill} | {repeat} | {ways[way]} | {r['edge']} | {' '.join(r['probed'])} | {r['asked']:,} "
                      f"| {r['seconds']:.0f} | {r['seconds'] / base['seconds']:.2f} |", flush=True)
    print(f"all searches: {seconds['base']:.0f} s to the digit, {seconds['now']:.0f} s now, "
          f"ratio {seconds['now'] / seconds['base']:.2f}")


if __name__ == "__main__":
    main()
