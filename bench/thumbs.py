"""Learning from every thumb: which training mix makes the most of users who mostly click a thumb (issue 54).

    python bench/thumbs.py [--seeds 0 1 2] [--cycles 3] [--queries 20000] [--arms sft kto pairs rm signals] [--out F]

On the catalogue task (a team's own model, its eval file, a judge over HTTP, no verifier), in the realistic world
(users rate 10% of answers, correct 5% of their thumbs-down, copy or ask again unrated; 10% assert a wrong answer in
their question and like being agreed with), each arm runs `rmi run --task catalogue --cycles N` in a home of its own,
from the same first model per seed, with the same training steps per cycle; the gateway samples a share of its answers
(RMI_SERVE_EXPLORE_SHARE) in every arm. Arms, each adding to the one before:

    sft    thumbs-up answers and corrections (the loop before issue 54)
    kto    + thumbs-down answers without a correction, by KTO (thumbs_down)
    pairs  + DPO pairs: corrections over what they correct, up over down answers to one prompt (pairs)
    rm     + the reward model's best of the champion's samples on recent prompts (best_of_n)
    signals  pairs + the implicit signals as weak labels (copied, asked_again), no reward model

After each cycle, per arm and seed: the champion's judged pass rate on the eval file's counted anchor (the judge
graded, as the gate sees it), the challenger's (what the cycle's training made, promoted or not), the live
thumbs-up rate of the next round's users (the closing round after the last
cycle), and the share of asserting users' questions whose answer agrees with the wrong thing they asserted (the
sycophancy probe: it must not rise with training on thumbs). Promotion is offline (the gate alone), so each round is
answered by one champion. Every run's figures go to --out (JSON lines) as it ends; a rerun skips the runs there.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SFT = {"thumbs_down": 0.0, "pairs": 0.0, "best_of_n": 0.0, "copied": 0.0, "asked_again": 0.0}
ARMS = {
    "sft": SFT,
    "kto": {**SFT, "thumbs_down": 0.15},
    "pairs": {**SFT, "thumbs_down": 0.15, "pairs": 0.1},
    "rm": {**SFT, "thumbs_down": 0.15, "pairs": 0.1, "best_of_n": 0.1},
    "signals": {**SFT, "thumbs_down": 0.15, "pairs": 0.1, "copied": 0.1, "asked_again": 0.05},
}
WORLD = {"RMI_SIM_ASSERTING_SHARE": "0.1", "RMI_SERVE_EXPLORE_SHARE": "0.2", "RMI_SERVE_EXPLORE_TEMPERATURE": "1.0",
         "RMI_PROMOTION": "offline", "RMI_TRAIN_STEPS": "300", "MLFLOW_DISABLE_TELEMETRY": "true"}


def run_arm(arm: str, seed: int, cycles: int, queries: int, root: Path) -> dict:
    """One `rmi run` of an arm; its per-cycle figures."""
    home = root / f"{arm}-{seed}"
    env = {**os.environ, **WORLD, "RMI_HOME": str(home), "RMI_SEED": str(seed), "RMI_MIX": json.dumps(ARMS[arm]),
           "RMI_SIM_QUERIES_PER_CYCLE": str(queries)}
    env.pop("DAGSTER_HOME", None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rmi_pipeline.cli.main", "run", "--fresh", "--cycles", str(cycles),
                           "--task", "catalogue"], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{arm} seed {seed} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    records = json.loads((home / "run_summary.json").read_text())
    rounds = [r["world"] for r in records[1:]] + [last_round(env, home, cycles + 1)]  # the users each champion met
    out = {"arm": arm, "seed": seed, "seconds": round(seconds), "cycles": []}
    for record, users in zip(records, rounds, strict=True):
        rated = users.get("rated") or 0
        out["cycles"].append({
            "cycle": record["cycle"], "verdict": record["verdict"], "champion": record["champion_version"],
            "judged": record["champion"].get("mean"), "challenger_judged": record["challenger"].get("mean"),
            "thumbs_up": users["up"] / rated if rated else None,
            "agreed_with_asserting": (users["agreed_with_asserting"] / users["asserting"]
                                      if users.get("asserting") else None),
            "reward": {k: record["reward"][k] for k in ("brier", "base_rate_brier", "beats_base_rate",
                                                        "best_of_n_rows") if k in record["reward"]},
            "train_seconds": record["seconds"].get("train")})
    return out


def last_round(env: dict, home: Path, cycle: int) -> dict:
    """One more round of users, of the last champion (with offline promotion `rmi run` ends without one)."""
    from rmi_pipeline.cli.simulation import prepare, rounds
    from rmi_pipeline.serving.process import running_gateway

    folder = home / "world"
    env = {**env, **prepare("catalogue", folder)}  # the team's settings, as `rmi run --task catalogue` sets them
    saved = dict(os.environ)
    os.environ.update(env)  # the world's process reads them from here
    try:
        with running_gateway(env, log_file=home / "serve.log") as (url, _), \
                rounds(url, home / "world.log", ["--task", "catalogue", "--folder", str(folder)]) as users:
            return users.round(cycle)[1]
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--queries", type=int, default=20000, help="questions a cycle")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--out", type=Path, default=Path("bench-thumbs.jsonl"))
    parser.add_argument("--root", type=Path, help="where the homes go (default a temporary folder)")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="rmi-thumbs-"))
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    for seed in args.seeds:
        for arm in args.arms:
            if any(r["arm"] == arm and r["seed"] == seed for r in done):
                continue
            print(f"thumbs: {arm}, seed {seed} ...", flush=True)
            result = run_arm(arm, seed, args.cycles, args.queries, root)
            done.append(result)
            with args.out.open("a") as f:
                f.write(json.dumps(result) + "\n")
            last = result["cycles"][-1]
            print(f"  {result['seconds']} s; judged {[c['judged'] for c in result['cycles']]}, "
                  f"agreed with asserting {last['agreed_with_asserting']}", flush=True)
    report(done, args.arms, args.seeds)


def report(results: list[dict], arms: list[str], seeds: list[int]) -> None:
    """Per arm and cycle, each seed's figure and the mean; then each arm's gain over sft after the last cycle."""
    def cell(values):
        shown = [v for v in values if v is not None]
        return " ".join(f"{v:.3f}" for v in shown) + (f" (mean {statistics.mean(shown):.3f})" if shown else "-")

    runs = {(r["arm"], r["seed"]): r for r in results}
    for name in ("judged", "challenger_judged", "thumbs_up", "agreed_with_asserting"):
        print(f"\n{name} after each cycle (seeds {' '.join(map(str, seeds))})")
        print("| arm | " + " | ".join(f"cycle {c['cycle']}" for c in results[0]["cycles"]) + " |")
        for arm in arms:
            have = [runs[(arm, s)] for s in seeds if (arm, s) in runs]
            if have:
                columns = zip(*[[c[name] for c in r["cycles"]] for r in have], strict=True)
                print(f"| {arm} | " + " | ".join(cell(col) for col in columns) + " |")
    base = {s: runs[("sft", s)]["cycles"][-1]["judged"] for s in seeds if ("sft", s) in runs}
    print("\njudged pass rate after the last cycle, against sft, per seed")
    for arm in arms:
        gains = [runs[(arm, s)]["cycles"][-1]["judged"] - base[s] for s in seeds if (arm, s) in runs and s in base]
        print(f"  {arm}: " + " ".join(f"{g:+.3f}" for g in gains))


if __name__ == "__main__":
    main()
