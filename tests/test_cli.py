"""The `rmi` command: status after a real loop, and clear errors instead of tracebacks."""

import subprocess
import sys
from pathlib import Path

from rmi_pipeline.cli.main import main


def test_status_shows_the_champion_and_the_warehouse(loop_home, monkeypatch, capsys):
    monkeypatch.setenv("RMI_HOME", str(loop_home["home"]))
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    champion = loop_home["summary"][-1]["champion_version"]
    assert f"champion: v{champion}" in out and "canary: none (promotion: auto)" in out  # its closing round judged it
    assert "feedback events" in out and "thumbs-down" in out
    assert "runs (latest 8" in out and " improvement_cycle: success, " in out and "rmi-run" in out
    assert out.count("  model v") == len(loop_home["summary"]) * 2  # every model that served, both skills
    assert "did not pass at their latest run (passed: " in out and "champion_holds_up" in out


def test_the_loop_wrote_its_learning_curve_and_summary_and_its_tables_fit_120_columns(loop_home, monkeypatch):
    from rmi_pipeline.cli.report import CycleRecord, summary_table

    png = loop_home["home"] / "learning_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [r["cycle"] for r in loop_home["summary"]] == [0, 1]
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: still 120 at most
    text = summary_table([CycleRecord(**r) for r in loop_home["summary"]])
    assert max(map(len, text.splitlines())) <= 120 and "{" not in text
    assert all(word in text for word in ("gain", "verdict", "anchor", "top tier", "feedback", "quaran", "total"))


def test_the_duckdb_cli_installed_with_the_project_opens_the_warehouse_and_its_views(loop_home):
    from rmi_pipeline.resources.warehouse import Warehouse

    duckdb = Path(sys.executable).parent / "duckdb"
    attach = Warehouse(path=str(loop_home["home"] / "warehouse.sqlite")).attach_sql(read_only=True)
    out = subprocess.run([str(duckdb), "-csv", "-noheader", "-cmd", attach,
                          "-c", "SELECT count(*) FROM feedback_events; SELECT count(*) FROM feedback_quality;"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    events, quality_rows = map(int, out.stdout.split())
    assert events == sum(r["ingest"].get("ingested", 0) + r["closing"].get("ingest", {}).get("ingested", 0)
                         for r in loop_home["summary"]) and quality_rows > 0


def test_simulating_users_without_a_champion_is_a_clear_error(rmi_env, capsys):
    assert main(["simulate"]) == 2
    assert "no champion is serving yet" in capsys.readouterr().err


def test_the_console_script_is_installed():
    rmi = subprocess.run([str(Path(sys.executable).parent / "rmi"), "--help"], capture_output=True, text=True)
    assert rmi.returncode == 0 and "run" in rmi.stdout and "status" in rmi.stdout and "chat" in rmi.stdout
    version = subprocess.run([str(Path(sys.executable).parent / "rmi"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("rmi 0.")


def test_a_version_that_is_not_a_number_is_refused_at_once_and_the_champion_stays(rmi_env, capsys):
    assert main(["promote", "abc", "--reason", "a typo"]) == 2
    assert "Invalid value for 'version'" in capsys.readouterr().err


def test_a_fresh_home_forgets_the_old_gateway_log_and_eval_sets_and_keeps_what_the_loop_did_not_write(rmi_env):
    """Events left in a gateway's log belong to the old store: `--fresh` must not flush them into the new one; tiers
    the old champions grew would face the new first model with problems far past its reach."""
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
    from rmi_pipeline.resources import build_resources, layout
    from rmi_pipeline.resources.storage import ObjectStore
    from rmi_pipeline.world.curators import curate_eval_suite

    home = rmi_env.resolved_home
    (home / "serve").mkdir(parents=True)
    rmi_env.resolved_serve_log_path.write_bytes(b"old events")
    (home / "notes.txt").write_text("mine")
    build_resources(rmi_env)["notifier"].notify("promotion", "champion none -> v1", key="promoted-1")
    evals = ObjectStore(url=rmi_env.resolved_eval_url)
    for key in (layout.ANCHOR, layout.grown("0001"), layout.refreshed("r"), layout.mined("m")):
        evals.write_json(key, {"items": []})
    prepare_home(rmi_env, fresh=True)
    assert not rmi_env.resolved_serve_log_path.exists() and (home / "notes.txt").read_text() == "mine"
    assert build_resources(rmi_env)["notifier"].notify("promotion", "champion none -> v1", key="promoted-1"), \
        "the new run's first promotion is raised again"
    assert evals.exists(layout.ANCHOR), "a suite people curated is theirs"
    assert not any(evals.list(prefix) for prefix in (layout.GROWN, layout.REFRESHED, layout.MINED))
    # the simulated world's suite is the loop's own: an older one may hold other tiers, or another seed's problems
    curate_eval_suite(evals, ArithmeticRecipe(), 5, seed=1)
    prepare_home(rmi_env, fresh=True)
    assert not evals.exists(layout.ANCHOR)


def test_ctrl_c_during_a_cycle_stops_rmi_run_and_moves_no_champion(rmi_env):
    """Dagster turns the interrupt into a failed run; the loop must stop there rather than start the next cycle."""
    import os
    import signal
    import time

    from rmi_pipeline.resources import build_resources

    log = rmi_env.resolved_home.parent / "run.log"
    # a quick first model any score promotes, then a candidate still training when the interrupt comes: of its 1,000
    # steps the first 50 are reported (a fit reports every twentieth of its steps, at most every 200), and the
    # interrupt comes with 950 left
    env = {**os.environ, "RMI_TRAIN_BOOTSTRAP_STEPS": "50", "RMI_GATE_FIRST_FLOOR": "0", "RMI_TRAIN_STEPS": "1000",
           "RMI_SIM_QUERIES_PER_CYCLE": "200",
           # what the cycle judges and practises on does not matter here: a small suite and little practice
           "RMI_EVAL_ITEMS_PER_SLICE": "10", "RMI_EVAL_REFRESHED_ITEMS_PER_SLICE": "10",
           "RMI_PRACTICE_PROBLEMS": "20", "RMI_SELF_LABEL_PROBLEMS": "20", "RMI_PRACTICE_FAILED_PROMPTS": "20"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rmi"), "run", "--cycles", "3", "--fresh"],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        # the training program's steps stream to the terminal while it trains
        while "[cycle 1] training: training step " not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = log.read_text()
    assert "[cycle 1] interrupted: no more cycles" in out and "[cycle 2]" not in out, out
    assert str(build_resources(rmi_env)["registry"].version("champion").version) == "1"
