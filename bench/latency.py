"""From a feedback batch landing to a promoted champion, under the real Dagster daemon with default settings.

    python bench/latency.py

In a throwaway RMI_HOME it trains a first model (as `rmi run --cycles 0` does), starts `rmi ui` (webserver and
daemon), lets simulated users land one batch, and waits until the champion alias moves. The wall time is split
into waiting on sensor intervals, run queueing and start-up, and compute (the steps themselves).
"""

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="rmi-latency-")) / "home"
    os.environ["RMI_HOME"] = str(home)
    os.environ.setdefault("RMI_PROMOTION", "offline")  # feedback to promotion through the gate; a canary would wait
    from dagster import DagsterInstance, RunsFilter
    from dagster_dev import dagster_dev, wait_for

    from rmi_pipeline.cli.main import main as rmi
    from rmi_pipeline.settings import Settings
    from rmi_pipeline.world import World

    print(f"latency: first model in {home} ...", flush=True)
    rmi(["run", "--cycles", "0"])
    os.environ.pop("DAGSTER_HOME", None)
    settings = Settings()
    import atexit
    from contextlib import ExitStack

    from rmi_pipeline.serving.process import running_gateway, wait_ready

    gateway = ExitStack()  # the users' way in, stopped when the bench ends
    atexit.register(gateway.close)
    url, _ = gateway.enter_context(running_gateway())
    wait_ready(url, None)
    world = World(settings, url)
    before = world.registry.version("champion").version
    log = home / "dagster-dev.log"
    with dagster_dev(home, log):
        time.sleep(5)  # let the daemon take its first ticks, as a long-running deployment would have
        batches, stats = world.serve_cycle(1)
        landed = time.time()  # the round's closing flush has just written the batch file (a round takes seconds)
        print(f"latency: {', '.join(batches)} landed ({stats['queries']} questions); waiting for a promotion ...",
              flush=True)
        wait_for(lambda: world.registry.version("champion").version != before, 900, "promotion", log)
        promoted = time.time()
    instance = DagsterInstance.from_config(str(settings.dagster_home))
    runs = {}
    for job in ("ingest_feedback", "improvement_cycle"):
        records = instance.get_run_records(RunsFilter(job_name=job), limit=1)
        runs[job] = records[0]
    waiting = starting = compute = 0.0
    previous_end = landed
    for job in ("ingest_feedback", "improvement_cycle"):
        record = runs[job]
        created = record.create_timestamp.timestamp()
        steps = instance.get_run_step_stats(record.dagster_run.run_id)
        compute_here = sum(s.end_time - s.start_time for s in steps)
        waiting += created - previous_end
        starting += (record.end_time - created) - compute_here
        compute += compute_here
        previous_end = record.end_time
        print(f"  {job}: created {created - landed:6.1f} s after landing, queued and started "
              f"{record.start_time - created:5.1f} s, ran {record.end_time - record.start_time:5.1f} s "
              f"(steps {compute_here:5.1f} s)")
    total = promoted - landed
    print(f"\nbatch landing -> promoted champion: {total:.1f} s")
    print(f"  waiting on sensor intervals:       {waiting:6.1f} s ({waiting / total:.0%})")
    print(f"  run queueing and start-up:         {starting:6.1f} s ({starting / total:.0%})")
    print(f"  compute (the steps themselves):    {compute:6.1f} s ({compute / total:.0%})")
    print(f"  seen by this poll after the run:   {total - waiting - starting - compute:6.1f} s")


if __name__ == "__main__":
    main()
