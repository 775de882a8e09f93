"""Smarter models train their successors: a taught new generation against an untaught one, a distilled derivative
against one trained on the rows alone, on each recipe.

    python bench/generations.py [--recipes arithmetic,words] [--steps N] [--every N] [--arms A,B]
                                [--champion-steps N] [--items N] [--learning-rate LR] [--seed 0]

Per recipe, from one champion and one training set: the champion (the recipe's `tiny`) is trained from scratch on
generated problems of its tiers (what its cycles of practice taught it); the training set is what a dataset holds:
the recipe's seed set (tiers 1-3) and a few hundred answered questions over the champion's tiers. Four arms then
train for the same steps through the training program (rmi_pipeline/training/program.py, the loop's own path):
- a larger model (`small`) from scratch, taught by the champion (its labels on the slices it answers at least 0.9
  right, and its next-token distributions: RMI_TEACH_* defaults), and the same model on the training set alone;
- a student (`micro`, about a quarter of the champion's parameters or less) distilled so, and the same on the
  rows alone.
The sealed eval (fresh problems of the champion's tiers and past them, every slice counted) is answered every
`--every` steps: the steps each arm needs to reach the champion's score, the final score, the lowest share of the
champion's score kept on any slice, answers per second in this process against the champion's (ml/derivative.py's
timing on one thread, the gateway's default; the two timed in turns), and training tokens. Then the taught
generation, as if promoted, turns two more cycles warm-started from itself on the training set and its own practice
(ml/practice.py: harder problems it solves, checked by the verifier, and labels it backs up): its score per cycle.
"""

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import polars as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rmi_pipeline.ml.derivative import answers_per_second  # noqa: E402
from rmi_pipeline.ml.distill import reliable_slices  # noqa: E402
from rmi_pipeline.ml.train import fit  # noqa: E402
from rmi_pipeline.recipes.base import load_recipe  # noqa: E402
from rmi_pipeline.settings import Practice, Sampling, SelfLabelling, Teaching, Training  # noqa: E402
from rmi_pipeline.training.program import train  # noqa: E402

PLANS = {  # the champion's tiers and steps, the eval's tiers and items per slice, each arm's steps
    "arithmetic": {"recipe": "rmi_pipeline.recipes.arithmetic:ArithmeticRecipe", "tiers": list(range(1, 9)),
                   "eval_to": 14, "champion_steps": 3000, "items": 60, "asked": 400, "learning_rate": 3e-3,
                   "batch": 64, "steps": 5000, "every": 250},
    "words": {"recipe": "rmi_pipeline.recipes.words:WordsRecipe", "tiers": [1, 2, 3, 4], "eval_to": 6,
              "champion_steps": 2000, "items": 40, "asked": 400, "learning_rate": 1e-3, "batch": 32, "steps": 1500,
              "every": 150},
}
ARMS = {"generation-taught": ("generation, taught", "small", True),
        "generation-alone": ("generation, rows alone", "small", False),
        "derivative-distilled": ("derivative, distilled", "micro", True),
        "derivative-alone": ("derivative, rows alone", "micro", False)}


class Sealed:
    """The sealed eval: per slice, which items a model answers right."""

    def __init__(self, recipe, tasks):
        self.recipe, self.tasks = recipe, tasks
        self.slices = sorted({t.slice for t in tasks})

    def per_slice(self, model) -> dict[str, float]:
        right = self.recipe.correct(model, self.tasks)
        return {name: sum(r for r, t in zip(right, self.tasks, strict=True) if t.slice == name)
                / sum(t.slice == name for t in self.tasks) for name in self.slices}

    def mean(self, model) -> float:
        scores = self.per_slice(model)
        return sum(scores.values()) / len(scores)


class Curve(L.Callback):
    """The sealed eval's mean every `every` steps."""

    def __init__(self, sealed: Sealed, every: int):
        self.sealed, self.every, self.points = sealed, every, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % self.every == 0:
            pl_module.eval()
            self.points.append((trainer.global_step, self.sealed.mean(pl_module)))
            pl_module.train()


def champion_of(recipe, plan: dict, seed: int, trainer: dict):
    """The champion: the recipe's tiny model trained from scratch on true answers over its tiers."""
    torch.manual_seed(seed)
    model = recipe.build_model(plan["learning_rate"], plan["champion_steps"], size="tiny")
    tasks = recipe.sample_tasks(random.Random(seed), 40_000, list(recipe.skills), plan["tiers"])
    tokens, mask = recipe.encode(model, [t.prompt for t in tasks], [t.answer for t in tasks])
    fit(model, tokens, mask, max_steps=plan["champion_steps"], max_seconds=3600, batch_size=plan["batch"], seed=seed,
        trainer=Training(**trainer).trainer_options())
    return model.eval()


def rows_of(recipe, plan: dict, seed: int) -> pl.DataFrame:
    """The training set: the seed set, and questions over the champion's tiers with their true answers."""
    asked = recipe.sample_tasks(random.Random(seed + 1), plan["asked"], list(recipe.skills), plan["tiers"])
    seeds = recipe.seed_tasks(random.Random(seed + 2))
    return pl.DataFrame({"prompt": [t.prompt for t in seeds + asked], "target": [t.answer for t in seeds + asked],
                         "mix": ["replay"] * len(seeds) + ["feedback"] * len(asked), "scale": 1.0,
                         "skill": [t.skill for t in seeds + asked], "tier": [t.tier for t in seeds + asked]})


def arm(recipe, plan, folder: Path, size: str, teach: dict | None, steps: int, sealed: Sealed, every: int,
        seed: int, trainer: dict, warm: Path | None = None, rows: str = "rows.parquet"):
    """One model through the training program; (model, curve, metrics)."""
    out = folder / f"{size}-{'taught' if teach else 'alone'}-{time.monotonic_ns()}.ckpt"
    curve = Curve(sealed, every)
    metrics = train({
        "recipe": plan["recipe"], "dataset_uri": str(folder / rows), "storage_options": {},
        "warm_start_uri": str(warm) if warm else None, "checkpoint_uri": str(out),
        "mix_weights": {"replay": 0.5, "feedback": 1.0, "practice": 1.0, "self_label": 1.0}, "model_size": size,
        "steps": steps, "max_seconds": 7200, "seed": seed, "batch_size": plan["batch"],
        "learning_rate": plan.get("arm_learning_rate", plan["learning_rate"]), "trainer": trainer, "teach": teach},
        callbacks=[curve])
    model = recipe.load_checkpoint(out.read_bytes()).eval()
    curve.points.append((metrics["steps_done"], sealed.mean(model)))
    return model, curve.points, metrics


def steps_to(points: list[tuple[int, float]], score: float) -> int | None:
    return next((step for step, value in points if value >= score - 1e-9), None)


def bench(name: str, steps: int | None, every: int | None, seed: int, folder: Path, arms: list[str]) -> list[str]:
    plan = PLANS[name]
    steps, every = steps or plan["steps"], every or plan["every"]
    recipe = load_recipe(plan["recipe"])
    trainer = {**Training().hardware(), "accelerator": "cpu"}  # as candidate_model hands it to the program
    started = time.perf_counter()
    champion = champion_of(recipe, plan, seed, trainer)
    tiers = [t for t in range(1, plan["eval_to"] + 1) if t <= recipe.hardest_tier]
    sealed = Sealed(recipe, recipe.build_eval_suite(random.Random(seed + 100), plan["items"],
                                                    {s: tiers for s in recipe.skills}))
    per_slice = sealed.per_slice(champion)
    score = sum(per_slice.values()) / len(per_slice)
    reliable = reliable_slices(per_slice, 0.9)
    (folder / "teacher.ckpt").write_bytes(recipe.checkpoint(champion))
    rows_of(recipe, plan, seed).write_parquet(folder / "rows.parquet")
    prompts = [t.prompt for t in sealed.tasks]
    parameters = sum(p.numel() for p in champion.parameters())
    lines = [f"\n## {name}: champion (tiny, {parameters:,} parameters) trained {plan['champion_steps']} steps in "
             f"{time.perf_counter() - started:.0f} s: sealed eval {score:.3f} over {len(sealed.slices)} slices "
             f"({len(sealed.tasks)} items), reliable on {len(reliable)}",
             "", "| arm | parameters | steps to the champion's score | final score | lowest slice kept | "
             "answers/s (x champion) | tokens trained | wall s |", "|---|---|---|---|---|---|---|---|"]
    teach = {**Teaching().model_dump(), "teacher_uri": str(folder / "teacher.ckpt"), "reliable": reliable,
             "unreliable": sorted(set(per_slice) - set(reliable))}
    reached, taught_model = {}, None
    for label, size, taught in (ARMS[a] for a in arms):
        t = time.perf_counter()
        model, points, metrics = arm(recipe, plan, folder, size, teach if taught else None, steps, sealed, every,
                                     seed, trainer)
        seconds = time.perf_counter() - t
        reached[label] = steps_to(points, score)
        scores = sealed.per_slice(model)
        kept = min(scores[n] / per_slice[n] for n in sealed.slices if per_slice[n] > 0)
        speed, champion_speed = answers_per_second(recipe, [model, champion], prompts)
        reach = "-" if reached[label] is None else str(reached[label])
        lines.append(f"| {label} | {metrics['parameters']:,} | {reach} | {points[-1][1]:.3f} | {kept:.2f} | "
                     f"{speed:.0f} ({speed / champion_speed:.2f}x) | {metrics['tokens_trained'] / 1e6:.2f}M | "
                     f"{seconds:.0f} |")
        print(lines[-1], flush=True)
        print("   curve: " + " ".join(f"{s}:{v:.2f}" for s, v in points), flush=True)
        if label == "generation, taught":
            taught_model = model
    for kind in ("generation", "derivative"):
        if f"{kind}, rows alone" not in reached or not ({f"{kind}, taught", f"{kind}, distilled"} & set(reached)):
            continue
        a, b = reached[f"{kind}, {'taught' if kind == 'generation' else 'distilled'}"], reached[f"{kind}, rows alone"]
        if a and b:
            lines.append(f"{kind}: taught reaches the champion's score in {a} steps, alone in {b}: {b / a:.1f}x fewer")
        elif a:
            lines.append(f"{kind}: taught reaches the champion's score in {a} steps; alone not within {steps} "
                         f"(> {steps / a:.1f}x fewer)")
        else:
            lines.append(f"{kind}: taught does not reach the champion's score within {steps} steps")
    past = [t for t in range(plan["eval_to"] + 1, plan["eval_to"] + 9) if t <= recipe.hardest_tier]
    grown = Sealed(recipe, recipe.build_eval_suite(random.Random(seed + 200), plan["items"],
                                                   {s: past for s in recipe.skills})) if past else sealed
    if taught_model is not None:
        lines += climb(recipe, plan, folder, taught_model, grown, seed, trainer, steps)
    return lines


def climb(recipe, plan, folder: Path, model, sealed: Sealed, seed: int, trainer: dict, steps: int) -> list[str]:
    """Two more cycles of the taught generation as champion: the training set plus its own practice, warm-started;
    scored on `sealed`, tiers past the champion's eval where there are any (as the loop's suite grows past it)."""
    from rmi_pipeline.ml.practice import practise
    from rmi_pipeline.settings import DEFAULT_MIX

    mix = {**DEFAULT_MIX, "rl": 0.0, "hint_distill": 0.0}
    scores = [sealed.mean(model)]
    for cycle in (1, 2):
        made = practise(recipe, model, mix, [], random.Random(seed + cycle), seed + cycle,
                        practice=Practice(problems=500), sampling=Sampling(), self_labelling=SelfLabelling(),
                        saturation=0.9)
        own = pl.DataFrame([{"prompt": r["prompt"], "target": r["target"], "mix": r["source"], "scale": 1.0}
                            for r in made.rows], schema={"prompt": pl.String, "target": pl.String, "mix": pl.String,
                                                         "scale": pl.Float64})
        own = own.with_columns(skill=pl.lit("all"), tier=pl.lit(1, pl.Int64))
        pl.concat([pl.read_parquet(folder / "rows.parquet"), own], how="diagonal_relaxed").write_parquet(
            folder / f"cycle{cycle}.parquet")
        (folder / "warm.ckpt").write_bytes(recipe.checkpoint(model))
        model, points, _ = arm(recipe, plan, folder, "small", None, max(200, steps // 3), sealed, 10**9, seed + cycle,
                               trainer, warm=folder / "warm.ckpt", rows=f"cycle{cycle}.parquet")
        scores.append(points[-1][1])
        print(f"   cycle {cycle}: {len(made.rows)} rows of its own practice, score {scores[-1]:.3f}", flush=True)
    tiers = f"tiers {min(t.tier for t in sealed.tasks)}-{max(t.tier for t in sealed.tasks)}"
    return [f"the taught generation, promoted, in its next cycles (training set + its own practice and "
            f"self-labels, warm-started), on {tiers}: {' -> '.join(f'{s:.3f}' for s in scores)}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", default="arithmetic,words")
    parser.add_argument("--steps", type=int, help="each arm's training steps (default: the recipe's plan)")
    parser.add_argument("--every", type=int, help="steps between evaluations (default: the recipe's plan)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--champion-steps", type=int, help="the champion's training steps (default: the plan's)")
    parser.add_argument("--items", type=int, help="sealed-eval items per slice (default: the plan's)")
    parser.add_argument("--learning-rate", type=float, help="each arm's peak learning rate (default: the champion's)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"which of {', '.join(ARMS)}; the taught generation's "
                        "next cycles follow it")
    args = parser.parse_args()
    torch.set_num_threads(2)
    out = []
    with tempfile.TemporaryDirectory(prefix="rmi-generations-") as tmp:
        for name in args.recipes.split(","):
            if args.champion_steps:
                PLANS[name]["champion_steps"] = args.champion_steps
            if args.items:
                PLANS[name]["items"] = args.items
            if args.learning_rate:
                PLANS[name]["arm_learning_rate"] = args.learning_rate
            folder = Path(tmp) / name
            folder.mkdir()
            out += bench(name, args.steps, args.every, args.seed, folder, args.arms.split(","))
    print("\n".join(out))


if __name__ == "__main__":
    main()
