"""Feedback intake through real Dagster runs: quarantine, idempotent warehouse, counts that add up."""

import json

import pytest
from dagster import instance_for_test, materialize

from rmi_pipeline.assets import FEEDBACK
from rmi_pipeline.automation.sensors import new_feedback_sensor
from rmi_pipeline.resources import build_resources, layout


def event(i: int, **changes) -> str:
    record = {"schema_version": 1, "event_id": f"ev-{i}", "ts": "2026-11-30T10:00:00+00:00", "user_id": "u",
              "model_version": "1", "prompt": f"{i}+1=", "completion": str(i + 1), "rating": "up",
              "correction": None, "comment": None, "source": "user", "skill": "add", "meta": {}}
    return json.dumps({**record, **changes})


@pytest.fixture
def intake(rmi_env):
    resources = build_resources(rmi_env)
    with instance_for_test() as instance:
        def ingest(name: str, lines: list[str]):
            resources["storage"].write_bytes(layout.incoming(name), "\n".join(lines).encode())
            instance.add_dynamic_partitions("feedback_batch", [name])
            result = materialize(FEEDBACK, partition_key=name, instance=instance, resources=resources,
                                 raise_on_error=False)
            meta = {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
                    for e in result.get_asset_materialization_events()}
            return result, meta

        yield ingest, resources, instance


def quarantined_rows(resources, batch: str) -> list[str]:
    return resources["storage"].read_bytes(layout.quarantine(batch)).decode().splitlines()


def warehouse_count(resources) -> int:
    return resources["warehouse"].query("SELECT count(*) AS n FROM feedback_events")["n"][0]


def test_a_batch_lands_once_and_its_rows_add_up(intake):
    ingest, resources, _ = intake
    lines = [event(i) for i in range(20)] + ["{not json", event(3), event(99, rating="sideways")]
    result, meta = ingest("b1.jsonl", lines)
    assert result.success
    counts = meta["feedback_events"]
    assert counts == {"rows_in": 23, "ingested": 20, "duplicates": 1, "quarantined": 2, "warehouse_events": 20}
    quarantined = quarantined_rows(resources, "b1.jsonl")
    assert sorted(json.loads(q)["reason"][:14] for q in quarantined) == ["malformed JSON", "rating must be"]

    # the same events in a second file change nothing, and are counted as duplicates
    _, meta = ingest("b1-copy.jsonl", lines[:20])
    assert meta["feedback_events"]["ingested"] == 0 and meta["feedback_events"]["duplicates"] == 20
    assert warehouse_count(resources) == 20


def test_a_mostly_broken_batch_is_quarantined_whole_and_its_check_blocks(intake):
    ingest, resources, _ = intake
    result, meta = ingest("bad.jsonl", [event(1)] + ["garbage"] * 5)
    assert not result.success
    checks = {e.asset_check_key.name: e for e in result.get_asset_check_evaluations()}
    assert not checks["rows_valid"].passed
    assert "feedback_events" not in meta and warehouse_count(resources) == 0
    quarantined = quarantined_rows(resources, "bad.jsonl")
    assert len(quarantined) == 6  # the one good row waits there too, with the batch's reason
    assert any("quarantined whole" in q for q in quarantined)
    # and the next good batch is not held up by it
    result, _ = ingest("good.jsonl", [event(2)])
    assert result.success and warehouse_count(resources) == 1


def test_sensor_finds_every_new_batch_whatever_its_name_and_skips_known_ones(intake, rmi_env):
    from dagster import build_sensor_context

    _, resources, instance = intake
    storage = resources["storage"]
    for name in ["zzz.jsonl", "aaa.jsonl.gz", "m.parquet", "notes.txt", ".hidden.jsonl"]:
        storage.write_bytes(layout.incoming(name), b"")
    tick = lambda: new_feedback_sensor(build_sensor_context(  # noqa: E731
        instance=instance, resources={k: resources[k] for k in ("settings", "storage", "notifier")}))
    result = tick()
    keys = sorted(r.partition_key for r in result.run_requests)
    assert keys == ["aaa.jsonl.gz", "m.parquet", "zzz.jsonl"]
    assert all(r.run_key == r.partition_key for r in result.run_requests)
    instance.add_dynamic_partitions("feedback_batch", keys)
    storage.write_bytes(layout.incoming("0-earlier-name.jsonl"), b"")
    again = tick()  # the three never ran: asked for again under the same run key, which the daemon runs once
    assert sorted(r.partition_key for r in again.run_requests) == ["0-earlier-name.jsonl", *keys]
    assert all(r.run_key == r.partition_key for r in again.run_requests)


def test_an_ingest_process_finds_each_prompt_s_slice_without_importing_torch():
    """Each ingest is a process of its own (the CLI, a run of the daemon): reading the recipe's slices from prompts
    needs no model, so it does not pay torch's import (2 s of CPU a process)."""
    import subprocess
    import sys

    code = ("import sys, polars as pl; from rmi_pipeline.assets.feedback import add_slices; "
            "from rmi_pipeline.settings import DEFAULT_RECIPE; "
            "e = pl.DataFrame({'prompt': ['12+34=', '1234-5=', 'hello'], 'skill': [None, None, 'chat']}, "
            "schema={'prompt': pl.String, 'skill': pl.String}); out = add_slices(e, DEFAULT_RECIPE); "
            "print(out['skill'].to_list(), out['tier'].to_list(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "['add', 'sub', 'chat'] [2, 4, None] False"
