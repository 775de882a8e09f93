"""Self-improvement alone: how far the loop climbs past the seed set with no users and no labels but its own.

    python bench/climb.py [--cycles 10] [--modes self,verifier] [--seed 0]

The real loop (`rmi run`'s jobs, the gate, the growing eval suite) from the recipe's seed set only (sums and
differences of 1-3 digits, true answers). Each cycle the champion labels problems just past its reliable range and
keeps the labels it backs up, working back from them and by the recipe's route (bench/ablation.py's `self`); in the
`verifier` mode the recipe's verifier may also accept its practice answers and score its RL groups (`verifier`). No
user asks anything. Per cycle: the gate's verdict (and why a candidate was turned down), the highest tier the
champion solves at 0.9 on fresh problems per skill (the curated tiers each, past them probed at doubling steps and
then by halving), the share of the labels it kept that are right (only the benchmark knows the truth), the labels
kept, the tiers the eval suite holds, the wall time and the tokens trained. A climb stops early once the champion
solves every skill up to the recipe's hardest tier (arithmetic: 1,000 digits): no later cycle could gain.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ablation import CONFIG_ENV, CONFIGS, _run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--modes", default="self,verifier")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", metavar="DIR", help="keep each mode's RMI_HOME under DIR (default: a temporary "
                        "folder, removed at the end)")
    args = parser.parse_args()
    tables = {}
    with tempfile.TemporaryDirectory(prefix="rmi-climb-") as tmp:
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
        tmp = args.keep or tmp
        for mode in args.modes.split(","):
            label, mix = CONFIGS[mode]
            print(f"== {mode}: {label} (RMI_MIX={json.dumps(mix)}), seed {args.seed}", flush=True)
            tables[mode] = _run(tmp, mode, mix, 0, args.cycles, {**CONFIG_ENV[mode], "RMI_SEED": str(args.seed)})
    for mode, rows in tables.items():
        print(f"\n{mode}: {CONFIGS[mode][0]}, seed {args.seed}")
        print("| cycle | verdict | highest tier at 0.9 | labels kept | label precision | suite tiers | wall s "
              "| tokens trained |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            tiers = " ".join(f"{skill} {tier}" for skill, tier in r["by_skill"].items())
            precision = "-" if r["self_label_precision"] is None else f"{r['self_label_precision']:.3f}"
            tokens = "-" if r["tokens_trained"] is None else f"{r['tokens_trained'] / 1e6:.1f}M"
            print(f"| {r['cycle']} | {r['verdict']} | {tiers} | {r['self_labels']:,} | {precision} "
                  f"| {r['suite_tiers'] or '-'} | {r['seconds']:.0f} | {tokens} |")
        for r in rows:
            if r["verdict"] != "promote":
                print(f"cycle {r['cycle']}: {r['reason']}")


if __name__ == "__main__":
    main()
