"""Training steps per second of the loop's Lightning path against a plain PyTorch loop on the same model and rows.

    python bench/train_step.py [--steps 600] [--rounds 3] [--batch-size 64]

Both train the default recipe's model from the same initial weights on batches of the same size drawn alike from
the same rows, with the same AdamW settings and schedule, on the CPU (one thread each: the cores favour neither).
The Lightning path is `rmi_pipeline.ml.train.fit`, exactly what a cycle runs: weighted sampler, progress callback,
the Trainer's loop. Rounds alternate the order of the two to even out drift in machine load. The goal: the
Lightning path at 0.8x the plain loop or better.
"""

import argparse
import copy
import random
import statistics
import time


def plain_loop(module, batches) -> float:
    """The same optimization by hand: forward, masked loss, backward, AdamW step, schedule step.

    The loss is written out here rather than taken from `training_step`, whose `self.log` needs a Trainer."""
    import torch
    import torch.nn.functional as F

    config = module.configure_optimizers()
    optimizer, schedule = config["optimizer"], config["lr_scheduler"]["scheduler"]
    net = module.model.train()
    started = time.perf_counter()
    for tokens, mask in batches:
        logits = net(tokens[:, :-1])
        target = mask[:, 1:]
        loss = F.cross_entropy(logits[target], tokens[:, 1:][target])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    torch.cuda.synchronize() if torch.cuda.is_available() else None
    return len(batches) / (time.perf_counter() - started)


def lightning_path(module, tokens, mask, steps: int, batch_size: int) -> float:
    from rmi_pipeline.ml.train import fit

    result = fit(module, tokens, mask, max_steps=steps, max_seconds=3600, batch_size=batch_size, seed=0,
                 trainer={"accelerator": "cpu"})
    return result.steps / result.seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    import torch

    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe

    torch.set_num_threads(1)
    recipe = ArithmeticRecipe()
    tasks = recipe.sample_tasks(random.Random(0), 20_000, list(recipe.skills), list(recipe.tiers))
    tokens, mask = recipe.encode(None, [t.prompt for t in tasks], [t.answer for t in tasks])
    torch.manual_seed(0)
    initial = recipe.build_model(learning_rate=3e-3, max_steps=args.steps)
    order = torch.randint(0, len(tokens), (args.steps, args.batch_size), generator=torch.Generator().manual_seed(0))
    batches = [(tokens[i].long(), mask[i]) for i in order]  # as LitGPT casts each batch of byte tokens
    lightning_path(copy.deepcopy(initial), tokens, mask, 50, args.batch_size)  # warm-up: imports, first-call costs
    plain, lit = [], []
    for round_ in range(args.rounds):
        runs = [("plain", lambda: plain_loop(copy.deepcopy(initial), batches)),
                ("lightning", lambda: lightning_path(copy.deepcopy(initial), tokens, mask, args.steps,
                                                     args.batch_size))]
        for name, run in runs if round_ % 2 == 0 else runs[::-1]:
            (plain if name == "plain" else lit).append(run())
            print(f"round {round_ + 1}: {name:9s} {(plain if name == 'plain' else lit)[-1]:7.1f} steps/s", flush=True)
    p, q = statistics.median(plain), statistics.median(lit)
    print(f"\nmedian of {args.rounds} rounds, {args.steps} steps of batch {args.batch_size}, "
          f"{sum(x.numel() for x in initial.parameters()):,} parameters, 1 thread")
    print(f"plain PyTorch loop  {p:7.1f} steps/s  1.00x")
    print(f"Lightning (fit)     {q:7.1f} steps/s  {q / p:.2f}x  (goal: 0.80x or better)")


if __name__ == "__main__":
    main()
