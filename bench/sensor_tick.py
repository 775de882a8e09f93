"""What one new_feedback_sensor tick costs when the feedback folder is big, against listing the folder alone.

    python bench/sensor_tick.py [--known 10000] [--new 10] [--repeat 5]

In a throwaway RMI_HOME (local store, Dagster's sqlite instance as `rmi run` uses it) it lands KNOWN batch
files whose partitions are already registered plus NEW unseen ones, then times, best of REPEAT: listing
feedback/incoming/ through the object store, and one sensor tick (which lists, reads the known partitions and
answers NEW run requests). The ratio is what the sensor adds over the listing it cannot avoid.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path


def best_of(repeat: int, fn) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--known", type=int, default=10_000)
    parser.add_argument("--new", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ["RMI_HOME"] = tempfile.mkdtemp(prefix="rmi-bench-sensor-")
    from dagster import AssetMaterialization, DagsterInstance, build_sensor_context

    from rmi_pipeline.assets import feedback_events
    from rmi_pipeline.assets.partitions import feedback_batches
    from rmi_pipeline.automation.sensors import new_feedback_sensor
    from rmi_pipeline.cli.home import prepare_home
    from rmi_pipeline.resources import build_resources, layout
    from rmi_pipeline.settings import Settings

    settings = Settings()
    prepare_home(settings)
    storage = build_resources(settings)["storage"]
    folder = Path(storage.path(layout.INCOMING))
    folder.mkdir(parents=True)
    known = [f"batch-{i:06d}.jsonl" for i in range(args.known)]
    new = [f"new-{i:03d}.jsonl" for i in range(args.new)]
    for name in known + new:  # contents do not matter to the sensor: it never opens a file
        (folder / name).write_bytes(b"{}\n")
    instance = DagsterInstance.get()
    instance.add_dynamic_partitions(feedback_batches.name, known)
    for name in known:  # landed: feedback_events has materialized each of them
        instance.report_runless_asset_event(AssetMaterialization(feedback_events.key, partition=name))
    resources = build_resources(settings)
    context = lambda: build_sensor_context(  # noqa: E731
        instance=instance, resources={k: resources[k] for k in ("settings", "storage", "notifier")})

    listing, names = best_of(args.repeat, lambda: storage.list(layout.INCOMING))
    tick, result = best_of(args.repeat, lambda: new_feedback_sensor(context()))
    partitions, _ = best_of(args.repeat, lambda: instance.get_dynamic_partitions(feedback_batches.name))
    assert len(names) == args.known + args.new and len(result.run_requests) == args.new
    print(f"{args.known} known batch files + {args.new} new, local store, best of {args.repeat}:")
    print(f"  list feedback/incoming/     {listing * 1000:8.1f} ms")
    print(f"  read known partitions       {partitions * 1000:8.1f} ms")
    print(f"  one new_feedback_sensor tick{tick * 1000:8.1f} ms  ({tick / listing:.1f}x the listing; "
          f"{len(result.run_requests)} run requests)")


if __name__ == "__main__":
    main()
