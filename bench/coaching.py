"""Coaching in words, measured: does a textual hint help, and which distillation teaches the unhinted model more?

    python bench/coaching.py [--seeds 0,1] [--size tiny] [--steps 300]

On the words recipe (a small Hugging Face Llama built here). A model is trained on the seed set and then on
corrections up to 5 words, each also as a lesson in reading the critique of the corrected answer as a hint (as a
cycle of the loop trains it); on problems it gets wrong (greedy) the coach gives its critique back as a hint.
Printed per seed:
- success with the hint against a second, unhinted sampled attempt on the same failed prompts;
- then three copies of the model are trained the same number of steps on the same replay rows, plus:
  control   nothing more (the effect of the extra steps alone),
  answers   the hinted successes as (plain prompt, hinted answer) rows,
  tokens    the same rows taught by KL to the hinted model's next-token distributions on the answer;
  and each copy's unhinted greedy success on the failed prompts, on the subset the hint solved, and on fresh
  problems (what the extra training cost elsewhere).
"""

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from rmi_pipeline.ml.objective import taught_by_teacher  # noqa: E402
from rmi_pipeline.ml.rl import coach  # noqa: E402
from rmi_pipeline.ml.train import fit  # noqa: E402
from rmi_pipeline.recipes.words import WordsRecipe  # noqa: E402


def share(recipe, model, tasks) -> float:
    return sum(recipe.correct(model, tasks)) / max(1, len(tasks))


def trained(recipe, data: bytes, rows: list, steps: int, seed: int, teachers: list | None = None):
    """A copy of the model trained `steps` on (prompt, target) rows; `teachers`: hinted prompts to distil from."""
    module = recipe.load_checkpoint(data, learning_rate=1e-3, max_steps=steps)
    tokens, mask = recipe.encode(module, [p for p, _ in rows], [t for _, t in rows])
    scales = teacher_rows = None
    if teachers is not None:
        teacher_rows = taught_by_teacher(recipe, module, teachers, [t for _, t in rows])
        scales = (teacher_rows < 0).float()  # taught rows learn from their teacher only
    fit(module, tokens, mask, max_steps=steps, max_seconds=1800, batch_size=64, seed=seed, scales=scales,
        teacher_rows=teacher_rows)
    return module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--steps", type=int, default=300, help="steps of each distillation copy")
    args = parser.parse_args()
    recipe = WordsRecipe()
    for seed in [int(s) for s in args.seeds.split(",")]:
        started = time.time()
        rng = random.Random(seed)
        torch.manual_seed(seed)
        seeds = [(t.prompt, t.answer) for t in recipe.seed_tasks(rng)]
        model = recipe.build_model(3e-3, 1200, size=args.size)
        tokens, mask = recipe.encode(model, [p for p, _ in seeds], [a for _, a in seeds])
        fit(model, tokens, mask, max_steps=1200, max_seconds=1800, batch_size=64, seed=seed)
        # users correct its answers up to 5 words; each correction also teaches reading the critique as a hint
        asked = recipe.sample_tasks(rng, 3000, list(recipe.skills), [4, 5])
        served = recipe.answer(model, [t.prompt for t in asked])
        corrections = [(t.prompt, t.answer) for t in asked]
        lessons = [(recipe.hint(t.prompt, recipe.verify(t.prompt, s)[1]), t.answer)
                   for t, s in zip(asked, served, strict=True) if recipe.verify(t.prompt, s)[0] < 1]
        replay = rng.sample(seeds, 6000)
        model = trained(recipe, recipe.checkpoint(model), corrections + lessons + replay, 600, seed)
        data = recipe.checkpoint(model)

        problems = recipe.sample_tasks(rng, 1500, list(recipe.skills), [3, 4, 5])
        co = coach(recipe, model, [t.prompt for t in problems], 0.7, seed)
        failed = [t for t in problems if t.prompt in set(co.failed_prompts)]
        solved = [t for t in failed if any(r["prompt"] == t.prompt for r in co.rows)]
        fresh = recipe.sample_tasks(rng, 600, list(recipe.skills), list(recipe.tiers))
        print(f"seed {seed}: {co.failed} failed of {len(problems)}; with the hint {co.solved_with_hint} solved "
              f"({co.solved_with_hint / max(1, co.failed):.3f}), a second unhinted sample "
              f"{co.solved_without_hint} ({co.solved_without_hint / max(1, co.failed):.3f})")
        replay_rows = rng.sample(seeds + corrections, 4000)
        hinted = [(r["prompt"], r["target"]) for r in co.rows]
        copies = {
            "control": trained(recipe, data, replay_rows, args.steps, seed),
            "answers": trained(recipe, data, replay_rows + hinted * 4, args.steps, seed),
            "tokens": trained(recipe, data, replay_rows + hinted * 4, args.steps, seed,
                              teachers=[None] * len(replay_rows) + [r["teacher"] for r in co.rows] * 4),
        }
        print(f"  {'':8} {'failed':>7} {'hint-solved':>12} {'fresh':>7}   (unhinted greedy success)")
        print(f"  {'before':8} {0.0:7.3f} {0.0:12.3f} {share(recipe, model, fresh):7.3f}")
        for name, copy in copies.items():
            print(f"  {name:8} {share(recipe, copy, failed):7.3f} {share(recipe, copy, solved):12.3f} "
                  f"{share(recipe, copy, fresh):7.3f}")
        print(f"  ({time.time() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
