"""Test helpers: feedback events as a client writes them, and the intake path (land, tick, ingest) on any store."""

from __future__ import annotations

import json

from rmi_pipeline.resources import layout


def event(i: int, **changes) -> str:
    """One schema-v1 feedback line; `changes` replace fields (a value of ... removes the field)."""
    record = {"schema_version": 1, "event_id": f"ev-{i}", "ts": "2026-11-30T10:00:00+00:00", "user_id": "u",
              "model_version": "1", "prompt": f"{i}+1=", "completion": str(i + 1), "rating": "up",
              "correction": None, "comment": None, "source": "user", "skill": "add", "meta": {}}
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v is not ...})


class Intake:
    """The real feedback path against one Dagster instance: files land, the sensor ticks, runs materialize."""

    def __init__(self, resources: dict, instance):
        self.resources, self.instance = resources, instance
        self.storage = resources["storage"]

    def land(self, name: str, data: bytes) -> None:
        self.storage.write_bytes(layout.incoming(name), data)

    def tick(self):
        """One new_feedback_sensor tick; its new partitions are added, as the daemon would."""
        from dagster import build_sensor_context

        from rmi_pipeline.automation.sensors import new_feedback_sensor

        resources = {k: self.resources[k] for k in ("settings", "storage", "notifier")}
        result = new_feedback_sensor(build_sensor_context(instance=self.instance, resources=resources))
        for request in getattr(result, "dynamic_partitions_requests", None) or []:
            self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        return result

    def ingest(self, name: str):
        """Materialize feedback_batch and feedback_events for one batch; (result, metadata per asset)."""
        from dagster import materialize

        from rmi_pipeline.assets import FEEDBACK

        result = materialize(FEEDBACK, partition_key=name, instance=self.instance, resources=self.resources,
                             raise_on_error=False)
        meta = {e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
                for e in result.get_asset_materialization_events()}
        return result, meta

    def quarantined(self, name: str) -> list[dict]:
        text = self.storage.read_bytes(layout.quarantine(name)).decode()
        return [json.loads(line) for line in text.splitlines()]

    def warehouse_count(self) -> int:
        return int(self.resources["warehouse"].query("SELECT count(*) AS n FROM feedback_events")["n"][0])
