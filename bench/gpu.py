"""Training throughput of a recipe's model through the same Lightning path the loop uses.

    python bench/gpu.py [--recipe arithmetic|words] [--steps 200] [--batch-size 1024]

On a CUDA GPU it trains the recipe's "gpu" size (arithmetic: our 85M GPT; words: an 85M Hugging Face Llama) in
bf16-mixed and prints tokens/s, model FLOPs utilization against the GPU's dense bf16 peak, peak memory, and for
the words recipe answers/s through `generate` with its KV cache. Without one it falls back to the "tiny" size on
the CPU in 32-bit, so the script is always runnable. MFU counts 6 x parameters x tokens FLOPs per step (forward and
backward, attention FLOPs left out: at under 40 tokens they are negligible).
"""

import argparse
import random
import time

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--recipe", choices=["arithmetic", "words"], default="arithmetic")
    args = parser.parse_args()

    import torch

    from rmi_pipeline.ml.train import fit
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
    from rmi_pipeline.recipes.words import WordsRecipe

    gpu = torch.cuda.is_available()
    size, precision = ("gpu", "bf16-mixed") if gpu else ("tiny", "32-true")
    batch = args.batch_size or (1024 if gpu else 64)
    recipe = ArithmeticRecipe() if args.recipe == "arithmetic" else WordsRecipe()
    tasks = recipe.sample_tasks(random.Random(0), 50_000, list(recipe.skills), list(recipe.tiers))
    module = recipe.build_model(learning_rate=3e-4, max_steps=args.steps, size=size)
    tokens, mask = recipe.encode(module, [t.prompt for t in tasks], [t.answer for t in tasks])
    params = sum(p.numel() for p in module.parameters())
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    marks: list[tuple[int, float]] = []
    fit(module, tokens, mask, max_steps=args.steps, max_seconds=3600, batch_size=batch,
        trainer={"accelerator": "gpu" if gpu else "cpu", "devices": 1, "precision": precision},
        report=lambda step, total, loss: marks.append((step, time.perf_counter())))
    # time the second half of the run: allocation and warm-up fall in the first
    (first_step, first_t), (last_step, last_t) = marks[len(marks) // 2], marks[-1]
    timed, seconds = last_step - first_step, last_t - first_t
    tokens_per_s = timed * batch * (tokens.shape[1] - 1) / seconds
    device = torch.cuda.get_device_name() if gpu else "CPU"
    print(f"device: {device}; {args.recipe} size {size} ({params / 1e6:.1f}M parameters), {precision}, batch {batch}, "
          f"{args.steps} steps")
    print(f"throughput: {tokens_per_s:,.0f} tokens/s ({timed / seconds:.1f} steps/s)")
    if gpu:
        peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in device), None)
        mfu = 6 * params * tokens_per_s / peak if peak else None
        print(f"model FLOPs utilization: {mfu:.1%}" if mfu else "MFU: unknown peak for this GPU")
        print(f"peak memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    if args.recipe == "words":  # decoding through generate, batched, with its KV cache
        prompts = [t.prompt for t in tasks[:4096]]
        recipe.generate_batch = 512 if gpu else 64
        recipe.answer(module, prompts[:recipe.generate_batch])  # warm-up
        started = time.perf_counter()
        recipe.answer(module, prompts)
        print(f"answers: {len(prompts) / (time.perf_counter() - started):,.0f}/s (batches of {recipe.generate_batch})")


if __name__ == "__main__":
    main()
