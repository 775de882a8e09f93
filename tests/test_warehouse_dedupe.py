"""The warehouse is idempotent on event_id without a PRIMARY KEY: a repeated event is counted as a duplicate and
stored once, also when two ids share a key."""

import pytest

from rmi_pipeline.resources import warehouse as wh
from rmi_pipeline.schema import event_frame


def events(*ids: str, batch: str = "b1"):
    return event_frame([{"event_id": i, "schema_version": 1, "prompt": f"{i}?", "completion": "x", "rating": "up",
                         "source": "user", "batch_id": batch} for i in ids])


def stored(warehouse) -> list[tuple]:
    return warehouse.query("SELECT event_id, batch_id FROM feedback_events ORDER BY event_id").rows()


@pytest.mark.parametrize("key", [wh.KEY, "hash(event_id) % 2"], ids=["hash", "every-id-collides"])
def test_each_event_is_stored_once_whatever_the_batches_and_the_key_collisions(tmp_path, monkeypatch, key):
    monkeypatch.setattr(wh, "KEY", key)  # with two keys in all, nearly every id shares its key with another
    warehouse = wh.Warehouse(path=str(tmp_path / "w.sqlite"))
    assert warehouse.ingest(events("a", "b", "c", "a")) == (3, 1)  # repeated inside the batch
    assert warehouse.ingest(events("a", "b", "c", batch="b1-again")) == (0, 3)  # the same batch landed again
    assert warehouse.ingest(events("c", "d", "e", batch="b2")) == (2, 1)
    assert stored(warehouse) == [("a", "b1"), ("b", "b1"), ("c", "b1"), ("d", "b2"), ("e", "b2")]


def test_keys_are_computed_anew_when_the_hash_they_were_made_with_is_gone(tmp_path):
    warehouse = wh.Warehouse(path=str(tmp_path / "w.sqlite"))
    warehouse.ingest(events("a", "b"))
    with warehouse.connect() as conn:  # as after a DuckDB upgrade that changed hash()
        conn.execute("UPDATE feedback_events SET id_key = 42")
        conn.execute("UPDATE warehouse_info SET value = 'a hash of another version' WHERE key = 'id_key_probe'")
    assert warehouse.ingest(events("a", "b", "c")) == (1, 2)
    assert len(stored(warehouse)) == 3


def test_a_home_copied_or_moved_elsewhere_keeps_its_warehouse(tmp_path):
    """The lake's Parquet files beside its catalog move with it: RMI_HOME restored from a backup, or copied to try
    something, still opens, with every event, and dedupes against them."""
    import shutil

    first = wh.Warehouse(path=str(tmp_path / "home" / "warehouse.sqlite"))
    first.ingest(events(*(f"e{i}" for i in range(3000))))  # past DuckLake's inlining: Parquet files on disk
    assert list((tmp_path / "home").rglob("*.parquet"))
    shutil.copytree(tmp_path / "home", tmp_path / "copy")
    shutil.rmtree(tmp_path / "home")
    moved = wh.Warehouse(path=str(tmp_path / "copy" / "warehouse.sqlite"))
    assert moved.ingest(events("e0", "new", batch="b2")) == (1, 1)
    assert len(stored(moved)) == 3001


def test_a_stream_reads_every_commit_made_since_its_process_opened_the_lake(tmp_path):
    """The DuckDB that streams (the dataset, the mined eval set) is opened once per process and stays open: each
    query still reads the latest snapshot, of this process's ingests and of another process's."""
    import subprocess
    import sys

    warehouse = wh.Warehouse(path=str(tmp_path / "w.sqlite"))
    warehouse.ingest(events("a"))

    def streamed() -> list[str]:
        return sorted(i for frame in warehouse.stream("SELECT event_id FROM feedback_events ORDER BY event_id")
                      for i in frame["event_id"])

    assert streamed() == ["a"]
    warehouse.ingest(events("b", batch="b2"))
    assert streamed() == ["a", "b"]
    other = ("from rmi_pipeline.resources.warehouse import Warehouse; from rmi_pipeline.schema import event_frame; "
             f"print(Warehouse(path={str(tmp_path / 'w.sqlite')!r}).ingest(event_frame([{{'event_id': 'c', "
             "'schema_version': 1, 'prompt': 'c?', 'completion': 'x', 'rating': 'up', 'source': 'user', "
             "'batch_id': 'b3'}])))")
    done = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True, check=True)
    assert done.stdout == "(1, 0)\n"
    assert streamed() == ["a", "b", "c"]
