"""The Dagster definitions: they load fast, and the graph is the loop of DESIGN.md."""

import subprocess
import sys

from rmi_pipeline.definitions import defs

GRAPH = {  # asset -> its upstream assets; a change to the loop's shape shows up here as a diff
    "feedback_batch": set(),
    "feedback_events": {"feedback_batch"},
    "eval_suite": {"feedback_events"},
    "practice": {"feedback_events", "eval_suite"},
    "training_dataset": {"feedback_events", "eval_suite", "practice"},
    "candidate_model": {"training_dataset"},
    "candidate_evaluation": {"candidate_model", "eval_suite"},
    "champion": {"candidate_evaluation"},
    "champion_health": {"eval_suite"},
}


def test_the_asset_graph_is_the_loop():
    graph = defs.resolve_asset_graph()
    got = {key.to_user_string(): {p.to_user_string() for p in graph.get(key).parent_keys}
           for key in graph.get_all_asset_keys()}
    assert got == GRAPH
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert checks == {("feedback_batch", "rows_valid"), ("training_dataset", "no_eval_overlap"),
                      ("training_dataset", "no_canary"), ("candidate_evaluation", "eval_headroom")}


def test_only_evaluation_assets_hold_the_sealed_eval_store():
    holders = {a.key.to_user_string() for a in defs.assets if "eval_store" in a.required_resource_keys}
    assert holders == {"eval_suite", "candidate_evaluation", "champion_health"}


def test_jobs_and_sensor_are_defined():
    assert defs.resolve_job_def("improvement_cycle") and defs.resolve_job_def("ingest_feedback")
    assert defs.resolve_sensor_def("new_feedback_sensor").job_name == "ingest_feedback"
    assert defs.resolve_sensor_def("enough_feedback_sensor").job_name == "improvement_cycle"
    assert defs.resolve_sensor_def("regression_sensor").job_name == "improvement_cycle"
    schedule = defs.resolve_schedule_def("health_schedule")
    assert schedule.cron_schedule == "0 * * * *" and schedule.job_name == "health_check"


def test_loading_definitions_does_not_import_heavy_libraries():
    code = ("import sys; import rmi_pipeline.definitions; "
            "print(sorted(m for m in ('torch', 'lightning', 'mlflow', 'great_expectations') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
