"""Answers per second of the loop's decoding (keys and values cached) against recomputing every step, same run.

    python bench/decoding.py [--problems 20000] [--tier 8]

Practice, RL, the coach, self-labelling, the evals and the simulated users all answer through
`ml.decoding.decode`; a cycle of the full method decodes a few hundred thousand answers. Both ways run on the same
model and prompts (greedy and sampled), problems of one tier (prompts of one width decode together), and the
answers must come out identical.
"""

import argparse
import random
import time

import torch


def recomputed(net, prompts, new_tokens, temperature, generator, batch_size=2048):
    """The baseline: the whole prefix through the model for every new token."""
    out = []
    for start in range(0, len(prompts), batch_size):
        idx = prompts[start:start + batch_size]
        for _ in range(new_tokens):
            logits = net(idx)[:, -1].float()
            nxt = (torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)
                   if temperature else logits.argmax(-1, keepdim=True))
            idx = torch.cat([idx, nxt], dim=1)
        out.append(idx[:, prompts.shape[1]:])
    return torch.cat(out)


def main() -> None:
    from rmi_pipeline.ml.decoding import decode
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
    from rmi_pipeline.recipes.arithmetic import tokens as tok
    from rmi_pipeline.recipes.arithmetic.problems import parse

    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=20000)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--tier", type=int, default=8)
    args = parser.parse_args()
    recipe = ArithmeticRecipe()
    torch.manual_seed(0)
    net = recipe.build_model(3e-3, 10, args.size).model.eval()
    tasks = recipe.sample_tasks(random.Random(0), args.problems, list(recipe.skills), [args.tier])
    prompts = tok.encode([tok.model_prompt(*parse(t.prompt)) for t in tasks])
    print(f"{args.problems} problems of {args.tier} digits, {args.size} model, {torch.get_num_threads()} threads")
    for temperature in (0.0, 0.7):
        seconds, answers = {}, {}
        with torch.no_grad():
            for name, run in (("recomputed", recomputed), ("cached", decode)):
                started = time.perf_counter()
                answers[name] = run(net, prompts, args.tier + 1, temperature=temperature,
                                    generator=torch.Generator().manual_seed(1))
                seconds[name] = time.perf_counter() - started
        same = torch.equal(answers["recomputed"], answers["cached"])
        print(f"temperature {temperature}: recomputed {args.problems / seconds['recomputed']:,.0f} answers/s, "
              f"cached {args.problems / seconds['cached']:,.0f} answers/s, "
              f"{seconds['recomputed'] / seconds['cached']:.1f}x; identical answers: {same}")


if __name__ == "__main__":
    main()
