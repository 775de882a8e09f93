"""`rmi simulate --live`: the world keeps landing batches from the champion, drifts when asked, stops on Ctrl-C."""

import io
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from rmi_pipeline.cli.main import main
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.recipes.base import slice_name
from rmi_pipeline.resources import build_resources, layout
from rmi_pipeline.settings import DEFAULT_RECIPE as RECIPE_PATH
from rmi_pipeline.world.curators import curate_eval_suite

R = ArithmeticRecipe()


@pytest.fixture
def serving(rmi_env, monkeypatch):
    """A home with an eval suite and an untrained champion serving: it barely knows anything."""
    monkeypatch.setenv("RMI_SIM_QUERIES_PER_CYCLE", "400")
    monkeypatch.setenv("RMI_SIM_MALFORMED_SHARE", "0")
    resources = build_resources(rmi_env)
    curate_eval_suite(resources["eval_store"], ArithmeticRecipe(), 20, seed=0)
    torch.manual_seed(0)
    registry = resources["registry"]
    with registry.run("serving", tags={}) as run_id:
        version = registry.register_model(run_id, R.checkpoint(R.build_model(0.0, 1)), RECIPE_PATH, tags={}).version
    registry.promote(version, {"promoted_by": "test"})
    return resources


def landed(storage) -> dict[str, Counter]:
    """Slices users rated per batch file the gateway wrote (its unrated answer events left out: they include the
    product team's probes)."""
    import polars as pl

    recipe, out = ArithmeticRecipe(), {}
    for key in sorted(storage.list(layout.INCOMING)):
        rated = pl.read_parquet(io.BytesIO(storage.read_bytes(key))).filter(pl.col("rating").is_not_null())
        out[key.rsplit("/", 1)[-1]] = Counter(slice_name(*recipe.slice_of(p)) for p in rated["prompt"])
    return out


def test_live_drift_moves_half_the_users_to_a_slice_the_champion_barely_knows(serving, capsys):
    assert main(["simulate", "--live", "--scenario", "drift", "--scenario-after", "1", "--batches", "2",
                 "--interval", "0"]) == 0
    out = capsys.readouterr().out
    batches = landed(serving["storage"])
    assert len(batches) == 2 and all(name.startswith("serve-") for name in batches)
    before, after = batches.values()
    # users of cycle 1 ask up to 5 digits; the drift goes to the easiest slice above, which the champion fails
    assert max(int(s.split("/")[1]) for s in before) == 5
    drift, asked = after.most_common(1)[0]
    assert drift in ("add/6", "sub/6") and before[drift] == 0 and asked == 200
    assert f"drift: 50% of users now ask {drift}, where champion v1 is right 0%" in out
    assert out.count("] batch ") == 2 and "live world stopped after 2 batches" in out


@pytest.fixture
def knowing(rmi_env, monkeypatch):
    """A home whose champion answers every question right (tests/knowing_recipe.py), served by `rmi serve`."""
    from knowing_recipe import KnowsUpTo

    monkeypatch.setenv("RMI_RECIPE", "knowing_recipe:KnowsUpTo")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("RMI_SIM_QUERIES_PER_CYCLE", "800")
    monkeypatch.setenv("RMI_SIM_MALFORMED_SHARE", "0")
    monkeypatch.setenv("RMI_SIM_WRONG_USER_SHARE", "0")
    resources = build_resources(rmi_env)
    recipe = KnowsUpTo()
    curate_eval_suite(resources["eval_store"], recipe, 20, seed=0)
    registry = resources["registry"]
    with registry.run("serving", tags={}) as run_id:
        version = registry.register_model(run_id, recipe.checkpoint(recipe.build_model(0.0, 1)),
                                          "knowing_recipe:KnowsUpTo", tags={}).version
    registry.promote(version, {"promoted_by": "test"})
    return resources


def test_partner_users_ask_round_amounts_and_their_client_sends_a_wrong_correction_with_every_rating(
        knowing, capsys):
    import polars as pl

    from rmi_pipeline.recipes.arithmetic import problems

    assert main(["simulate", "--live", "--scenario", "partner", "--scenario-after", "1", "--batches", "2",
                 "--interval", "0"]) == 0
    out = capsys.readouterr().out
    keys = sorted(knowing["storage"].list(layout.INCOMING))
    before, after = (pl.read_parquet(io.BytesIO(knowing["storage"].read_bytes(k))) for k in keys)
    partner = pl.col("user_id").str.starts_with("partner-")
    assert not before.filter(partner).height
    asked = after.filter(pl.col("rating").is_null())  # the gateway's own record of each answer
    assert 0.1 < asked.filter(partner).height / asked.height < 0.22  # a fifth but tier 1 (round amounts start at 2)
    after = after.filter(pl.col("rating").is_not_null())
    theirs = after.filter(partner)
    assert theirs.height == asked.filter(partner).height  # every partner answer rated through its client
    def truth(prompt: str) -> str:
        return str(problems.solve(*problems.parse(prompt)))

    honest = []
    for prompt, completion, rating, correction in theirs.select("prompt", "completion", "rating",
                                                                "correction").iter_rows():
        a, _, b = problems.parse(prompt)
        zeros = 10 ** (len(str(max(a, b))) // 2)
        assert a % zeros == b % zeros == 0  # round amounts
        assert correction == str(int(truth(prompt)) + 1)  # every rating carries the client's wrong total
        honest.append(rating == ("up" if completion == truth(prompt) else "down"))
    assert all(honest)  # the partner's users still judge the answers they see: right, so thumbs-up
    others = after.filter(~pl.col("user_id").str.starts_with("partner-") & pl.col("correction").is_not_null())
    assert others.height == 0  # the champion is always right: the only corrections are the partner client's
    assert "partner: 20% of questions now come from a partner app" in out and "(partner: " in out


@contextmanager
def live_after_its_first_batch(home: Path):
    """`rmi simulate --live` in a process of its own, once its first batch has landed; killed with its group after."""
    log = home / "live.log"
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rmi"), "simulate", "--live", "--interval", "600"],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, env=os.environ.copy(),
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while " batch 1:" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        yield proc, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_ctrl_c_stops_the_live_world_after_the_batch_in_flight(serving, rmi_env):
    with live_after_its_first_batch(rmi_env.resolved_home) as (proc, log):
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    assert "live world stopped after 1 batches" in log.read_text()
    assert len(landed(serving["storage"])) == 1
    assert not world_programs(rmi_env.resolved_home)  # the world's program ended with the command


def world_programs(home: Path) -> list[int]:
    """Process ids of the simulated world's programs (`python -m rmi_pipeline.world`) serving `home`."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"rmi_pipeline.world" in argv and f"RMI_HOME={home}".encode() in environ:
            pids.append(int(proc.name))
    return pids


def test_a_killed_simulate_leaves_no_world_behind(serving, rmi_env):
    """The world runs as a program of its own: when the command that started it is killed, it stops too."""
    with live_after_its_first_batch(rmi_env.resolved_home) as (proc, _):
        assert world_programs(rmi_env.resolved_home)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while world_programs(rmi_env.resolved_home):
            assert time.monotonic() < deadline, "the world went on after the command that started it was killed"
            time.sleep(0.2)
