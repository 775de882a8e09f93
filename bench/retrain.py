"""Why a candidate was worse than its champion: train it again on the same rows, with and without the gradient clip.

    python bench/retrain.py HOME --candidate 6 [--seeds 5,6] [--clips 0,1] [--tiers 3,8,16,32,64,128,200,240]

HOME is a kept RMI_HOME (`bench/climb.py --keep DIR` keeps DIR/self, DIR/verifier). The candidate's dataset, the
champion it was warm-started from and its steps, rate and batch come from its MLflow run; each seed and clip trains
it again with the real training program (in this process, one thread, so two can run side by side), then the
champion, the candidate as the loop trained it and each retrained one answer the same fresh problems (40 per skill
and tier past 64 digits, 100 below). Only the benchmark knows the answers.
"""

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("home")
    parser.add_argument("--candidate", required=True, help="the model version to train again")
    parser.add_argument("--seeds", default="", help="training seeds (default: the candidate's own)")
    parser.add_argument("--clips", default="0,1", help="gradient clips to compare (0: none)")
    parser.add_argument("--tiers", default="3,8,16,32,64,128,160,200,240")
    args = parser.parse_args()
    os.environ["RMI_HOME"] = str(Path(args.home).resolve())
    import torch

    from rmi_pipeline.recipes.base import load_recipe
    from rmi_pipeline.resources import build_resources, layout
    from rmi_pipeline.settings import Settings
    from rmi_pipeline.training.program import train

    torch.set_num_threads(1)
    settings = Settings()
    resources = build_resources(settings)
    registry, storage, recipe = resources["registry"], resources["storage"], load_recipe(settings.recipe)
    client = registry.client()
    candidate = client.get_model_version(settings.model_name, args.candidate)
    params, champion = client.get_run(candidate.run_id).data.params, candidate.tags["warm_start_from"]
    dataset = candidate.tags["dataset_version"]
    manifest = storage.read_json(layout.dataset_manifest(dataset))
    models = {f"v{champion} (champion)": registry.load(champion, recipe),
              f"v{args.candidate} (as trained)": registry.load(args.candidate, recipe)}
    with tempfile.TemporaryDirectory(prefix="rmi-retrain-") as tmp:
        for seed in (args.seeds or params["seed"]).split(","):
            for clip in args.clips.split(","):
                out = Path(tmp) / f"{seed}-{clip}.pt"
                started = time.perf_counter()
                train({"recipe": settings.recipe, "dataset_uri": storage.uri(layout.dataset_rows(dataset)),
                       "mix_weights": manifest["weights"], "checkpoint_uri": out.as_uri(),
                       "warm_start_uri": storage.uri(layout.champion_checkpoint(champion)),
                       "model_size": settings.training.model_size, "steps": int(params["steps"]), "max_seconds": 1e9,
                       "seed": int(seed), "batch_size": int(params["batch_size"]),
                       "learning_rate": float(params["learning_rate"]), "focus": [], "focus_weight": 1.0,
                       "hint_distillation": settings.practice.hint_distillation,
                       "trainer": {"accelerator": "cpu", "precision": "32-true", "gradient_clip": float(clip)}})
                print(f"trained seed {seed} clip {clip} in {time.perf_counter() - started:.0f} s", flush=True)
                models[f"seed {seed}, clip {clip}"] = recipe.load_checkpoint(out.read_bytes())
    tiers = [int(t) for t in args.tiers.split(",")]
    print(f"\n| model | skill | {' | '.join(map(str, tiers))} |\n|---|---|{'---|' * len(tiers)}")
    for name, model in models.items():
        for skill in recipe.skills:
            rng = random.Random(f"retrain-{skill}")  # the same problems for every model
            cells = []
            for tier in tiers:
                tasks = recipe.sample_tasks(rng, 100 if tier <= 64 else 40, [skill], [tier])
                cells.append(f"{sum(recipe.correct(model, tasks)) / len(tasks):.2f}")
            print(f"| {name} | {skill} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
