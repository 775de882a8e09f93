"""A training step of the arithmetic GPT as the loop runs it against the step before, same run, same batches:
the relative scores' gradient summed per bucket (`gpt._Lookup`) against autograd's scatter-add for the gather, and
AdamW fused against per tensor.

    python bench/step_kernels.py [--steps 100] [--rounds 3] [--threads 2] [--tokens 64]

Both start from the same weights and take the same batches; their losses must agree to float rounding.
"""

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe, gpt  # noqa: E402


def steps(net, batches, fused: bool) -> tuple[float, float]:
    """(seconds a step, last loss)."""
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.01,
                                  fused=fused or None)
    started = time.perf_counter()
    for x in batches:
        loss = F.cross_entropy(net(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - started) / len(batches), loss.item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--tokens", type=int, default=64, help="tokens a row (the training rows' longest is 64)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    initial = ArithmeticRecipe().build_model(3e-3, args.steps).model.train()
    vocab = initial.cfg.vocab_size
    batches = [torch.randint(0, vocab, (64, args.tokens + 1)) for _ in range(args.steps)]
    lookup = gpt._Lookup.apply

    def before(rel, bucket):  # the gather, its gradient autograd's scatter-add
        return rel[:, bucket].transpose(0, 1)
    times: dict[str, list[float]] = {"before": [], "now": []}
    losses = {}
    for r in range(args.rounds + 1):  # the first round warms up
        for way in (("before", "now") if r % 2 else ("now", "before")):
            gpt._Lookup.apply = before if way == "before" else lookup
            try:
                seconds, losses[way] = steps(copy.deepcopy(initial), batches, fused=way == "now")
            finally:
                gpt._Lookup.apply = lookup
            if r:
                times[way].append(seconds)
    assert abs(losses["before"] - losses["now"]) < 1e-3 * abs(losses["before"]), losses
    b, n = statistics.median(times["before"]), statistics.median(times["now"])
    print(f"{args.steps} steps of 64 rows x {args.tokens} tokens, {args.threads} torch thread(s): before "
          f"{1000 * b:.1f} ms a step, now {1000 * n:.1f} ms: {b / n:.2f}x (median of {args.rounds}); last loss "
          f"{losses['before']:.5f} vs {losses['now']:.5f}")


if __name__ == "__main__":
    main()
