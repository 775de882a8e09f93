"""How fast `rmi chat` answers Slack: the acknowledgement (Slack gives up after 3 s) and the reply after it.

    python bench/chat.py [--rounds 20]

In a throwaway RMI_HOME with three untrained model versions: `rmi chat` on 127.0.0.1, then --rounds signed
`/rmi status` requests and --rounds `/rmi promote` / `/rmi rollback` pairs, each from the request's start to the
acknowledgement (its HTTP response) and to the reply posted to response_url. Prints the median and the worst.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from slack import slash  # noqa: E402
from webhook import serve_hook  # noqa: E402

SECRET, USER = "bench-signing-secret", "U0BENCH"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="rmi-chat-")) / "home"
    os.environ.update({"RMI_HOME": str(home), "RMI_SLACK_SIGNING_SECRET": SECRET, "RMI_SLACK_ALLOWED_USERS": USER,
                       "MLFLOW_DISABLE_TELEMETRY": "true"})
    import httpx
    import torch

    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
    from rmi_pipeline.resources import build_resources
    from rmi_pipeline.settings import DEFAULT_RECIPE, Settings

    settings = Settings()
    prepare_home(settings)
    registry, recipe = build_resources(settings)["registry"], ArithmeticRecipe()
    torch.manual_seed(0)
    with registry.run("bench", tags={}) as run_id:
        for _ in range(3):
            registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)), DEFAULT_RECIPE, tags={})
    registry.promote("1", {"promoted_by": "bench"})
    replies: list = []
    receiver = serve_hook(replies)
    hook = f"http://127.0.0.1:{receiver.server_port}/response"
    port = 3100 + os.getpid() % 1000
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rmi"), "chat", "--port", str(port)],
                            stdout=open(home / "chat.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                httpx.get(f"{url}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, (home / "chat.log").read_text()
                time.sleep(0.2)
        texts = {"status": ["status"] * args.rounds,
                 "promote / rollback": [t for _ in range(args.rounds // 2)
                                        for t in ("promote 2 bench", "rollback bench")]}
        print("| command | acknowledged (median, worst) | reply posted (median, worst) |\n|---|---:|---:|")
        for name, batch in texts.items():
            acks, done = [], []
            for text in batch:
                before, start = len(replies), time.perf_counter()
                reply = slash(url, SECRET, text, USER, hook)
                acks.append(time.perf_counter() - start)
                assert reply.status_code == 200 and reply.json()["text"].startswith("Working on"), reply.text
                while len(replies) == before:
                    time.sleep(0.005)
                done.append(time.perf_counter() - start)
                assert not replies[-1]["text"].startswith((":x:", ":warning:")), replies[-1]["text"]
            print(f"| `/rmi {name}` ({len(batch)}) | {_ms(acks)} | {_ms(done)} |")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(30)
        receiver.shutdown()


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.0f} ms, {max(seconds) * 1000:.0f} ms"


if __name__ == "__main__":
    main()
