"""Training a candidate outside the orchestrator's process, through Dagster Pipes.

    program.py   the training program: `python -m rmi_pipeline.training.program` (the pod command); Pipes only
    client.py    what the launcher runs by default: hands the program's request to this home's warm worker
    worker.py    the warm worker: torch and Lightning imported once, one forked training program per candidate
    protocol.py  what client and worker agree on: where a worker listens, and its length-prefixed JSON messages

Nothing here imports dagster or mlflow (an import contract): a training pod needs the object store alone.
"""

import sys

PROGRAM = [sys.executable, "-m", "rmi_pipeline.training.program"]  # the command that trains one candidate
