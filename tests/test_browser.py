"""`rmi ui` over the loop's home, and pages in a real browser (Debian's headless Chromium, driven by playwright):
the loop's graph, runs and sensors in the Dagster UI, its stages as a newcomer sees them, and the gateway's chat
page, where a click becomes feedback in the warehouse.

Set RMI_UPDATE_SCREENSHOT=1 to refresh docs/lineage.png, the picture docs/explanation/architecture.md shows.
"""

import os
import shutil
from pathlib import Path

import httpx
import pytest
from dagster_dev import ROOT, dagster_dev

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
STAGES = ["feedback_batch", "feedback_events", "eval_suite", "training_dataset", "candidate_model",
          "candidate_evaluation", "champion", "champion_health"]


ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                    reason="needs Debian's chromium (`make test` installs it as root)")


@pytest.fixture(scope="module")
def ui(loop_home, tmp_path_factory):
    """`rmi ui` (the webserver and the daemon) over the loop's home, started once for this file's tests (about 20 s
    of CPU a start). No cycle of its own: the loop's closing round left enough new feedback to start one, whose run
    would change what the pages show (checks in progress) and the shared home the other tests read."""
    with dagster_dev(loop_home["home"], tmp_path_factory.mktemp("ui") / "ui.log",
                     RMI_CYCLE_MIN_NEW_EVENTS=str(10**9)) as graphql:
        yield graphql


def test_ui_shows_the_graph_and_the_runs_of_the_loop(ui):
    assets = {n["assetKey"]["path"][0] for n in ui("{ assetNodes { assetKey { path } } }")["assetNodes"]}
    runs = ui("{ runsOrError { ... on Runs { results { jobName status } } } }")["runsOrError"]["results"]
    sensors = ui("{ repositoriesOrError { ... on RepositoryConnection { nodes { sensors { name sensorState "
                 "{ status } } } } } }")["repositoriesOrError"]["nodes"][0]["sensors"]
    assert {"feedback_batch", "feedback_events", "training_dataset", "candidate_model", "candidate_evaluation",
            "champion"} <= assets
    jobs = sorted(r["jobName"] for r in runs if r["status"] == "SUCCESS")
    assert jobs.count("improvement_cycle") >= 2 and "ingest_feedback" in jobs
    assert {s["name"]: s["sensorState"]["status"] for s in sensors} == {
        name: "RUNNING" for name in ("new_feedback_sensor", "enough_feedback_sensor", "regression_sensor",
                                     "canary_sensor", "generation_sensor", "derivative_sensor",
                                     "approval_deadline_sensor", "health_after_ingest", "health_after_cycle",
                                     "run_failure_alert", "alert_outbox", "dead_run_sensor", "forget_sensor")}


@needs_chromium
def test_a_newcomer_sees_every_stage_described_and_the_gate_as_a_check_with_its_slices(ui, tmp_path):
    """The catalog, the lineage, and candidate_evaluation's page: the gate's check and its per-slice table shown
    as they are, without a dialog to open."""
    from playwright.sync_api import sync_playwright

    from rmi_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    described = {k.to_user_string(): graph.get(k).description for k in graph.get_all_asset_keys()}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        base = f"http://127.0.0.1:{ui.port}"
        page.goto(f"{base}/assets")
        page.get_by_text("champion_health").first.wait_for(timeout=30000)
        skip = page.get_by_role("button", name="Skip")  # a fresh profile is asked to join the community first
        if skip.count():
            skip.first.click()
        catalog = page.inner_text("body")
        page.goto(f"{base}/assets/candidate_evaluation")
        page.get_by_text("Show schema").first.wait_for(timeout=30000)  # the per-slice table, on the page itself
        evaluation = page.inner_text("body")
        page.goto(f"{base}/assets/candidate_evaluation?view=checks")
        for text in ("eval_headroom", "gate", "Passed"):  # the list of checks renders apart from the selected one
            page.get_by_text(text, exact=True).first.wait_for(timeout=30000)
        checks = page.inner_text("body")
        page.goto(f"{base}/assets/champion?view=lineage&lineageScope=upstream&lineageDepth=10")
        page.get_by_text("training_dataset").first.wait_for(timeout=30000)
        page.wait_for_timeout(1500)
        shot = tmp_path / "lineage.png"
        page.screenshot(path=str(shot))
        lineage = page.content()
        browser.close()
    assert all(stage in catalog for stage in STAGES)
    assert [key for key, text in described.items() if text.split(". ")[0][:60] not in catalog] == []
    assert "slice\titems\tcounted\tchallenger\tchampion\tdelta" in evaluation and "add/2\t" in evaluation
    assert "gate" in checks and "Passed" in checks  # cycle 1's challenger passed the gate
    assert all(stage in lineage for stage in ["feedback_batch", "training_dataset", "candidate_model", "champion"])
    assert shot.stat().st_size > 20_000
    if os.environ.get("RMI_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / "docs" / "lineage.png")


@needs_chromium
def test_the_chat_page_answers_and_a_thumbs_down_lands_in_the_warehouse(served):
    """Ask on `GET /`, see the answer and its version, type a correction, click thumbs-down: after the next ingest
    the warehouse holds that feedback, joined with the question and the answer shown."""
    from gateway import warehouse_events
    from playwright.sync_api import sync_playwright

    from rmi_pipeline.serving.process import running_gateway, wait_ready

    with running_gateway(served["env"]) as (url, _), sync_playwright() as p:
        wait_ready(url, "1")
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        page.goto(url)
        page.get_by_label("Your question").fill("123+456=")
        page.get_by_role("button", name="Ask").click()
        turn = page.locator(".turn").first
        turn.wait_for(timeout=30000)
        shown, meta = turn.locator(".answer").inner_text(), turn.locator(".meta").inner_text()
        turn.locator(".correction").fill("579")
        turn.locator(".down").click()
        page.get_by_text("feedback recorded").wait_for(timeout=30000)
        browser.close()
        httpx.post(f"{url}/v1/flush")
    assert "model version 1" in meta
    events = [e for e in warehouse_events(served["settings"]) if e["client"] == "web-page"]
    assert [(e["prompt"], e["completion"], e["rating"], e["correction"], e["model_version"]) for e in events] == [
        ("123+456=", shown, "down", "579", "1")]
