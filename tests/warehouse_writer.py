"""One ingest process of tests/test_warehouse_writers.py: `python warehouse_writer.py '<json>'` waits at the start
line with the others, ingests its batches through the real Warehouse, and prints their counts as JSON."""

import json
import sys
import time
from pathlib import Path

BATCHES = 3
SHARED, OWN, AGAIN = 300, 700, 100  # per batch: ids every writer sends at once, its own ids, its last batch's


def batch_ids(writer: int, batch: int) -> list[str]:
    """Each batch shares ids with the other writers' same batch, and repeats some of its writer's previous one."""
    ids = [f"shared-{batch}-{i}" for i in range(SHARED)] + [f"w{writer}-b{batch}-{i}" for i in range(OWN)]
    return ids + ([f"w{writer}-b{batch - 1}-{i}" for i in range(AGAIN)] if batch else [])


def main(config: dict) -> None:
    from rmi_pipeline.resources.warehouse import Warehouse
    from rmi_pipeline.schema import event_frame

    warehouse = Warehouse(**config["warehouse"])
    writer, start = config["writer"], Path(config["start"])
    batches = [event_frame([{"event_id": i, "schema_version": 1, "prompt": f"{i}?", "completion": "x",
                             "rating": "up", "source": "user", "batch_id": f"w{writer}-b{b}"}
                            for i in batch_ids(writer, b)]) for b in range(BATCHES)]
    (start.parent / f"ready-{writer}").touch()
    while not start.exists():  # every writer ready: they all begin within a few milliseconds
        time.sleep(0.005)
    counts = []
    for frame in batches:
        ingested, duplicates = warehouse.ingest(frame)
        counts.append({"rows": len(frame), "ingested": ingested, "duplicates": duplicates})
    print(json.dumps(counts))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
