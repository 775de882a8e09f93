"""Answers per second of the loop's decoding (keys and values cached) against recomputing every step, same run.

    python bench/decoding.py [--problems 20000] [--tier 8] [--ways recomputed,concatenated,cached]

Practice, RL, the coach, self-labelling, the evals and the simulated users all answer arithmetic through
`recipes.arithmetic.decoding.decode`; a cycle of the full method decodes a few hundred thousand answers. The ways
run on the same model and prompts (greedy and sampled), problems of one tier (prompts of one width decode
together), and the answers must come out identical. "concatenated" is the cache appended to by concatenation
(copied whole at every token), the loop's before its buffers doubled when full.
"""

import argparse
import random
import time

import torch


def recomputed(net, prompts, new_tokens, temperature, seeds, batch_size=2048):
    """The baseline: the whole prefix through the model for every new token."""
    from rmi_pipeline.recipes.arithmetic.decoding import drawn, uniform

    out = []
    for start in range(0, len(prompts), batch_size):
        idx = prompts[start:start + batch_size]
        for step in range(new_tokens):
            logits = net(idx)[:, -1].float()
            nxt = (drawn(torch.softmax(logits / temperature, -1), uniform(seeds[start:start + batch_size], step))
                   if temperature else logits.argmax(-1, keepdim=True))
            idx = torch.cat([idx, nxt], dim=1)
        out.append(idx[:, prompts.shape[1]:])
    return torch.cat(out)


def concatenated(cache, k, v):
    """The cache of keys and values grown by concatenation, as gpt.GPT kept it before."""
    if cache:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    cache[:] = [k, v, k.shape[2]]
    return k, v


def main() -> None:
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe, gpt
    from rmi_pipeline.recipes.arithmetic import tokens as tok
    from rmi_pipeline.recipes.arithmetic.decoding import decode, row_seeds
    from rmi_pipeline.recipes.arithmetic.problems import parse

    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=20000)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--tier", type=int, default=8)
    parser.add_argument("--ways", default="recomputed,concatenated,cached",
                        help="the first is the baseline (recomputing is slow past about 30 digits)")
    args = parser.parse_args()
    kept = gpt._kept
    recipe = ArithmeticRecipe()
    torch.manual_seed(0)
    net = recipe.build_model(3e-3, 10, args.size).model.eval()
    tasks = recipe.sample_tasks(random.Random(0), args.problems, list(recipe.skills), [args.tier])
    prompts = tok.encode([tok.model_prompt(*parse(t.prompt)) for t in tasks])
    print(f"{args.problems} problems of {args.tier} digits, {args.size} model, {torch.get_num_threads()} threads")
    for temperature in (0.0, 0.7):
        seconds, answers = {}, {}
        with torch.no_grad():
            for name in args.ways.split(","):
                run = recomputed if name == "recomputed" else decode
                gpt._kept = concatenated if name == "concatenated" else kept
                started = time.perf_counter()
                answers[name] = run(net, prompts, args.tier + 1, temperature=temperature,
                                    seeds=row_seeds(1, len(prompts)))
                seconds[name] = time.perf_counter() - started
        baseline = next(iter(seconds))
        same = all(torch.equal(answers[baseline], a) for a in answers.values())
        print(f"temperature {temperature}: " + ", ".join(
            f"{name} {args.problems / s:,.0f} answers/s ({seconds[baseline] / s:.1f}x)"
            for name, s in seconds.items()) + f"; identical answers: {same}")


if __name__ == "__main__":
    main()
