"""Memory and time of turning training rows into token tensors: the recipe's byte tokens against int64 ones.

    python bench/encoding.py [--rows 2000000]

The training program encodes every row of the dataset before its first step (10M feedback events: 7.7M rows).
The baseline is how rows were encoded before: a Python list of token ids per row, then one int64 tensor. Each
way runs in its own process on the same rows; printed: seconds, and the peak resident memory the encoding added
on top of the rows as Python strings, with the ratio baseline / recipe. The tokens must be equal.
"""

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def int64_lists(recipe, prompts, completions):
    """The baseline: every row a list of Python ints, then an int64 tensor."""
    import torch

    from rmi_pipeline.recipes.arithmetic import tokens as tok

    ids, spans = [], []
    for p, c in zip(prompts, completions, strict=True):
        a, op, b = recipe._parse(p)
        prompt = tok.model_prompt(a, op, b)
        row = prompt + tok.model_answer(int(c), tok.answer_len(a, b))
        ids.append([tok.STOI[ch] for ch in row])
        spans.append((len(prompt), len(row)))
    longest = max(map(len, ids))
    ids = torch.tensor([row + [tok.STOI[tok.PAD]] * (longest - len(row)) for row in ids], dtype=torch.long)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    for i, (start, end) in enumerate(spans):
        mask[i, start:end] = True
    return ids, mask


def one(way: str, n: int) -> None:
    """The child process: rows as strings, then one way of encoding them; prints a JSON line."""
    from ingest import synth

    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe

    recipe = ArithmeticRecipe()
    frame = synth(n, seed=7, bad=0, repeated=0)
    prompts, completions = frame["prompt"].to_list(), frame["completion"].to_list()
    # the frame stays alive: memory it freed and the allocator kept would hide what encoding takes
    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here (Linux)
    before = _status_mb("VmRSS")
    started = time.perf_counter()
    tokens, mask = (int64_lists(recipe, prompts, completions) if way == "int64"
                    else recipe.encode(None, prompts, completions))
    seconds = time.perf_counter() - started
    peak = _status_mb("VmHWM")
    digest = hashlib.sha256(tokens.long().numpy().tobytes() + mask.numpy().tobytes()).hexdigest()[:12]
    print(json.dumps({"seconds": seconds, "added_mb": peak - before, "tensor_mb": tokens.nbytes / 2**20,
                      "digest": digest}))


def _status_mb(field: str) -> float:
    status = Path("/proc/self/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith(f"{field}:")) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: int64 or recipe
    args = parser.parse_args()
    if args.one:
        return one(args.one, args.rows)
    results = {}
    for way in ("int64", "recipe"):
        out = subprocess.run([sys.executable, __file__, "--one", way, "--rows", str(args.rows)],
                             check=True, capture_output=True, text=True).stdout
        results[way] = json.loads(out.strip().splitlines()[-1])
    base, new = results["int64"], results["recipe"]
    print(f"{args.rows:,} rows")
    for way, r in results.items():
        print(f"{way:>7}: {r['seconds']:6.1f} s, {r['added_mb']:7.0f} MB added at peak, "
              f"tokens {r['tensor_mb']:5.0f} MB")
    print(f"recipe against int64: {base['seconds'] / new['seconds']:.1f}x faster, "
          f"{base['added_mb'] / max(new['added_mb'], 1):.1f}x less memory; identical tokens: "
          f"{base['digest'] == new['digest']}")


if __name__ == "__main__":
    main()
