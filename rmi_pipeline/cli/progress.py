"""What `rmi run` says while it works: each stage of a Dagster run as it starts and ends, the training program's
step and loss as they stream in through Pipes, and a line at least every HEARTBEAT seconds, so it is never silent.

It reads the run's events from the instance, as the UI does; the run itself logs only warnings to the terminal.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

HEARTBEAT = 6.0  # seconds a running stage goes unmentioned (on busy cores a line came up to 3 s late)
POLL = 1.0
STAGES = {"eval_suite": "eval suite", "practice": "practice (the champion's own data)",
          "training_dataset": "dataset", "candidate_model.plan_challengers": "planning the challengers",
          "candidate_model.challengers_trained": "challengers registered",
          "challenger_selection": "choosing the best challenger", "candidate_evaluation": "evaluation and gate",
          "champion": "promotion"}


def stage(step: str) -> str:
    """A step in words; each challenger's training is a step of its own ("candidate_model.train_challenger[
    candidate_2_of_4]": training candidate 2 of 4; the only one: training)."""
    if step.startswith("candidate_model.train_challenger["):
        which = step.partition("[")[2].rstrip("]")
        return "training" if which.endswith("_of_1") else "training " + which.replace("_", " ")
    return STAGES.get(step, step)


def new_run_id() -> str:
    return str(uuid.uuid4())


@contextmanager
def narrated(prefix: str, what: str, say: Callable[[str], None], instance=None,
             run_id: str | None = None) -> Iterator[None]:
    """While the block runs: the stages of run `run_id` (started inside the block with that id), and a line every
    HEARTBEAT seconds on what is still going. Two threads: a read of the run's events may wait on its writer."""
    stop, state = threading.Event(), _State(prefix, what, say)
    threads = [threading.Thread(target=_heartbeat, args=(state, stop), name="rmi-heartbeat", daemon=True)]
    if run_id is not None:
        threads.append(threading.Thread(target=_follow, args=(state, instance, run_id, stop), name="rmi-progress",
                                        daemon=True))
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)


class _State:
    def __init__(self, prefix: str, what: str, say):
        self.prefix, self.what, self._say = prefix, what, say
        self.begun = self.said = time.monotonic()
        self.started: dict[str, float] = {}  # running steps: when they started
        self.latest: dict[str, str] = {}  # step: its latest progress message
        self.lock = threading.Lock()

    def say(self, text: str) -> None:
        with self.lock:
            self._say(f"{self.prefix} {text}")
            self.said = time.monotonic()


def _heartbeat(state: _State, stop: threading.Event) -> None:
    while not stop.wait(POLL):
        now = time.monotonic()
        if now - state.said < HEARTBEAT:
            continue
        with state.lock:  # the other thread adds and removes steps
            step, since = next(iter(state.started.items()), (None, state.begun))
        state.say(f"{stage(step)}: {state.latest.get(step, 'running')} ({now - since:.0f} s)"
                  if step else f"{state.what}: still going ({now - since:.0f} s)")


def _follow(state: _State, instance, run_id: str, stop: threading.Event) -> None:
    cursor, last = None, False
    while not last:
        last = stop.wait(POLL)  # after the block: one more read, for the stages that ended since the last
        try:
            page = instance.get_records_for_run(run_id, cursor=cursor)
        except Exception:  # the run is not stored yet, or its storage is busy writing: the next poll reads it
            continue
        cursor = page.cursor or cursor
        for record in page.records:
            entry = record.event_log_entry
            step, kind = entry.step_key, entry.dagster_event.event_type_value if entry.dagster_event else None
            name = stage(step) if step else step
            if kind == "STEP_START":
                with state.lock:
                    state.started[step] = time.monotonic()
                state.say(f"{name}: started")
            elif kind in ("STEP_SUCCESS", "STEP_FAILURE") and step in state.started:
                with state.lock:
                    seconds = time.monotonic() - state.started.pop(step)
                state.say(f"{name}: {'done' if kind == 'STEP_SUCCESS' else 'failed'} in {seconds:.0f} s")
            elif kind is None and step and entry.user_message.startswith("training step"):
                state.latest[step] = entry.user_message  # "training step 400/800 loss 0.1234", from Pipes
