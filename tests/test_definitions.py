"""The Dagster definitions: they load fast, and the graph is the loop of DESIGN.md."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from rmi_pipeline.definitions import defs

SNAPSHOT = Path(__file__).parent / "snapshots" / "asset_specs.json"


def asset_specs() -> dict:
    """Every asset as the UI shows it: upstream assets, group, kinds, checks, partitioning and description."""
    graph = defs.resolve_asset_graph()
    checks = {(spec.asset_key, spec.name): spec.description for a in defs.assets for spec in a.check_specs}
    return {key.to_user_string(): {
        "deps": sorted(p.to_user_string() for p in node.parent_keys),
        "group": node.group_name,
        "kinds": sorted(node.kinds),
        "partitioned_by": node.partitions_def.name if node.partitions_def else None,
        "checks": {c.name: checks[(key, c.name)] for c in sorted(node.check_keys, key=lambda c: c.name)},
        "description": node.description,
    } for key, node in sorted((k, graph.get(k)) for k in graph.get_all_asset_keys())}


def test_the_asset_graph_is_the_loop_and_a_change_to_it_is_a_visible_diff():
    """The graph of DESIGN.md, snapshotted: RMI_UPDATE_SNAPSHOTS=1 rewrites tests/snapshots/asset_specs.json after an
    intended change, and the diff of that file is the review."""
    specs = asset_specs()
    if os.environ.get("RMI_UPDATE_SNAPSHOTS"):
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(specs, indent=1) + "\n")
    assert specs == json.loads(SNAPSHOT.read_text())


def test_every_asset_check_job_sensor_and_schedule_explains_itself_in_the_ui():
    specs = asset_specs()
    assert all(s["description"] and len(s["description"]) > 40 for s in specs.values()), specs
    assert all(text for s in specs.values() for text in s["checks"].values())
    for definition in [*defs.jobs, *defs.sensors, *defs.schedules]:
        assert definition.description and len(definition.description) > 40, definition.name
    # the UI renders descriptions as Markdown: a bare <name> outside a code span is taken for HTML and vanishes
    texts = [s["description"] for s in specs.values()] + [t for s in specs.values() for t in s["checks"].values()]
    assert not [t for t in texts if re.search(r"<[a-z]", re.sub(r"`[^`]*`", "", t))]


def test_every_asset_has_owners_and_links_to_the_code_that_makes_it(monkeypatch):
    from rmi_pipeline.definitions import build_definitions
    from rmi_pipeline.settings import Settings

    def catalog(settings):
        graph = build_definitions(settings).resolve_asset_graph()
        return {k.to_user_string(): graph.get(k) for k in graph.get_all_asset_keys()}

    here = catalog(Settings())
    assert {tuple(node.owners) for node in here.values()} == {("team:ml",)}
    assert {k for k, node in here.items() if "rmi/user-text" in node.tags} == {
        "feedback_batch", "feedback_events", "training_dataset"}  # what users wrote: untrusted, maybe personal
    for key, node in here.items():
        [ref] = node.metadata["dagster/code_references"].code_references
        assert Path(ref.file_path).is_file() and ref.line_number > 0, key
    monkeypatch.setenv("RMI_UI_CODE_URL", "https://github.com/example/rmi-pipeline")
    monkeypatch.setenv("RMI_UI_ASSET_OWNERS", "ml-oncall@example.com, team:evals")
    linked = catalog(Settings())
    assert linked["champion"].owners == ["ml-oncall@example.com", "team:evals"]
    [ref] = linked["champion"].metadata["dagster/code_references"].code_references
    assert ref.url.startswith("https://github.com/example/rmi-pipeline/tree/main/rmi_pipeline/assets/promotion.py#L")


def test_only_evaluation_assets_hold_the_sealed_eval_store():
    holders = {a.key.to_user_string() for a in defs.assets if "eval_store" in a.required_resource_keys}
    # judge_agreement for the judge's cached verdicts only: they quote eval items, so they stay sealed too;
    # fast_model judges a derivative on the sealed eval as candidate_evaluation judges a challenger, and
    # challenger_selection chooses among several on it
    assert holders == {"eval_suite", "judge_agreement", "challenger_selection", "candidate_evaluation",
                       "champion_health", "fast_model"}


def test_jobs_and_sensor_are_defined():
    assert defs.resolve_job_def("improvement_cycle") and defs.resolve_job_def("ingest_feedback")
    assert defs.resolve_sensor_def("new_feedback_sensor").job_name == "ingest_feedback"
    assert defs.resolve_sensor_def("enough_feedback_sensor").job_name == "improvement_cycle"
    assert defs.resolve_sensor_def("regression_sensor").job_name == "improvement_cycle"
    assert defs.resolve_sensor_def("generation_sensor").job_name == "improvement_cycle"
    assert defs.resolve_sensor_def("derivative_sensor").job_name == "derivative"
    schedule = defs.resolve_schedule_def("health_schedule")
    assert schedule.cron_schedule == "0 * * * *" and schedule.job_name == "health_check"


def test_the_loop_s_sensors_look_for_work_as_often_as_the_settings_say():
    from rmi_pipeline.definitions import build_definitions
    from rmi_pipeline.settings import Automation, Settings

    quick = build_definitions(Settings(automation=Automation(sensor_interval_seconds=7, feedback_interval_seconds=2)))
    intervals = {s.name: s.minimum_interval_seconds for s in quick.sensors}
    feedback_path = {"new_feedback_sensor": 2, "enough_feedback_sensor": 2}
    assert intervals == {**dict.fromkeys(intervals, 7), **feedback_path, "alert_outbox": 60, "dead_run_sensor": 60}
    assert {s.name: s.minimum_interval_seconds for s in defs.sensors} == {
        **dict.fromkeys(intervals, 30), **dict.fromkeys(feedback_path, 5), "alert_outbox": 60, "dead_run_sensor": 60}
    assert quick.resolve_sensor_def("new_feedback_sensor").job_name == "ingest_feedback"  # a working copy
    # the UI says how often each looks, as configured
    assert quick.resolve_sensor_def("new_feedback_sensor").description.startswith(
        "Every 2 s (RMI_FEEDBACK_INTERVAL_SECONDS): ")
    assert quick.resolve_sensor_def("regression_sensor").description.startswith(
        "Every 7 s (RMI_SENSOR_INTERVAL_SECONDS): ")


def test_loading_definitions_does_not_import_heavy_libraries():
    code = ("import sys; import rmi_pipeline.definitions; "
            "print(sorted(m for m in ('torch', 'lightning', 'mlflow', 'great_expectations') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
