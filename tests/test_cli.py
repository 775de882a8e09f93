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
    assert f"champion: v{champion}" in out
    assert "feedback events" in out and "thumbs-down" in out


def test_the_loop_wrote_its_learning_curve_and_summary(loop_home):
    png = loop_home["home"] / "learning_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [r["cycle"] for r in loop_home["summary"]] == [0, 1]


def test_simulating_users_without_a_champion_is_a_clear_error(rmi_env, capsys):
    assert main(["simulate"]) == 2
    assert "no champion is serving yet" in capsys.readouterr().err


def test_the_console_script_is_installed():
    rmi = subprocess.run([str(Path(sys.executable).parent / "rmi"), "--help"], capture_output=True, text=True)
    assert rmi.returncode == 0 and "run" in rmi.stdout and "status" in rmi.stdout


def test_a_fresh_home_forgets_the_old_gateway_log_and_keeps_what_the_loop_did_not_write(rmi_env):
    """Events left in a gateway's log belong to the old store: `--fresh` must not flush them into the new one."""
    from rmi_pipeline.cli.home import prepare_home

    home = rmi_env.resolved_home
    (home / "serve").mkdir(parents=True)
    rmi_env.serving.log_path.write_bytes(b"old events")
    (home / "notes.txt").write_text("mine")
    prepare_home(rmi_env, fresh=True)
    assert not rmi_env.serving.log_path.exists() and (home / "notes.txt").read_text() == "mine"
