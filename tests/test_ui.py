"""`rmi ui` serves the Dagster UI on 127.0.0.1 with the loop's graph and the history of the last run."""

from dagster_dev import dagster_dev


def test_ui_shows_the_graph_and_the_runs_of_the_loop(loop_home, tmp_path):
    with dagster_dev(loop_home["home"], tmp_path / "ui.log") as ui:
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
