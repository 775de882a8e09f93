"""The gateway's write-ahead log: every answer and every feedback is committed to SQLite before the client hears
back, then flushed as Parquet batch files into the object store's `feedback/incoming/`, where ingest finds them.

SQLite runs in WAL mode with `synchronous=FULL`, so a commit is on disk when it returns. One writer thread owns the
connection and commits whatever requests are waiting in one transaction (group commit: one fsync for many events).
A flush first names its batch and marks its events in one transaction, then writes the file, then forgets the
events: killed anywhere, the next flush writes the same batch under the same name again, and the warehouse, which
is idempotent on `event_id`, lands each event once.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path

from ..schema.fields import FIELDS, SCHEMA_VERSION

log = logging.getLogger(__name__)

TABLES = """
CREATE TABLE IF NOT EXISTS answers (response_id TEXT PRIMARY KEY, at REAL NOT NULL, user_id TEXT NOT NULL,
    model_version TEXT NOT NULL, prompt TEXT NOT NULL, completion TEXT NOT NULL, skill TEXT, arm TEXT NOT NULL,
    sampling TEXT);
CREATE INDEX IF NOT EXISTS answers_at ON answers (at);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL, batch TEXT);
CREATE INDEX IF NOT EXISTS events_batch ON events (batch);
CREATE TABLE IF NOT EXISTS batches (name TEXT PRIMARY KEY, events INTEGER NOT NULL, written INTEGER NOT NULL);
"""


class LogUnavailable(Exception):
    """The log could not commit (disk or log full, I/O error): nothing of that request was acknowledged."""


FULL = "the feedback log is full (the object store may be out of reach; RMI_SERVE_LOG_MAX_MB)"


def _make_room(conn, pages: int) -> None:
    """Refuse a new event when the log holds `pages` pages of them already."""
    used = conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]
    if used >= pages:
        raise LogUnavailable(FULL)


class UnknownResponse(LookupError):
    """Feedback names a response the gateway did not give, or gave longer ago than the feedback window."""


def new_response_id() -> str:
    """Sortable by time (its first 8 hex digits are the second it was made), so an expired id can be told apart."""
    import secrets

    return f"r{int(time.time()):08x}{secrets.token_hex(8)}"


def response_age_seconds(response_id: str) -> float | None:
    try:
        return time.time() - int(response_id[1:9], 16) if response_id.startswith("r") else None
    except ValueError:
        return None


class FeedbackLog:
    def __init__(self, path: Path, *, max_bytes: int, window_seconds: float):
        self.path, self.window_seconds = Path(path), window_seconds
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._max_bytes = max_bytes
        self._queue: queue.Queue = queue.Queue()
        self._flush_lock = threading.Lock()
        opened: Future = Future()
        self._writer = threading.Thread(target=self._run, args=(opened,), name="feedback-log", daemon=True)
        self._writer.start()
        opened.result()  # raises what opening raised

    # -- the writer thread: one connection, group commits --------------------------------------------------------
    def _run(self, opened: Future) -> None:
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            page_size = self._conn.execute("PRAGMA page_size").fetchone()[0]
            # new events may fill `max_bytes`; past it only a flush may write (it needs a little room to mark
            # its batch), so a full log can always be emptied
            self._room = max(64, self._max_bytes // page_size)
            self._conn.execute(f"PRAGMA max_page_count={self._room + max(64, self._room // 10)}")
            self._conn.executescript(TABLES)
            if "sampling" not in {row[1] for row in self._conn.execute("PRAGMA table_info(answers)")}:
                # a log written before exploration (every answer in it greedy): a restarted gateway keeps it
                self._conn.execute("ALTER TABLE answers ADD COLUMN sampling TEXT")
        except Exception as exc:  # noqa: BLE001 - raised in the constructor
            opened.set_exception(exc)
            return
        opened.set_result(None)
        while (item := self._queue.get()) is not None:
            items = [item]
            while len(items) < 2000:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this commit
                    break
                items.append(item)
            try:
                self._commit(items)
            except Exception as exc:  # noqa: BLE001 - the writer must outlive any one commit
                log.exception("feedback log commit failed")
                for _, fut in items:
                    if not fut.done():
                        fut.set_exception(LogUnavailable(f"the feedback log cannot write: {type(exc).__name__}"))
        self._conn.close()

    def _commit(self, items: list) -> None:
        """One transaction for every waiting request; each in a savepoint, so a refused one leaves nothing."""
        results = []
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            for fn, fut in items:
                self._conn.execute("SAVEPOINT item")
                try:
                    results.append((fut, fn(self._conn), None))
                except sqlite3.Error:
                    raise  # the log itself failed: nothing of this transaction is acknowledged
                except Exception as exc:  # noqa: BLE001 - this request's refusal (or a bug): handed back to it
                    self._conn.execute("ROLLBACK TO item")
                    results.append((fut, None, exc))
                self._conn.execute("RELEASE item")
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            log.error("feedback log could not commit %d requests: %s", len(items), exc)
            error = LogUnavailable(FULL if "full" in str(exc) else "the feedback log cannot write")
            for _, fut in items:
                fut.set_exception(error)
            return
        for fut, value, exc in results:
            fut.set_exception(exc) if exc is not None else fut.set_result(value)

    def submit(self, fn: Callable) -> Future:
        """Run `fn(connection)` in the writer's next transaction; the future resolves once it is committed."""
        fut: Future = Future()
        self._queue.put((fn, fut))
        return fut

    def close(self) -> None:
        self._queue.put(None)
        self._writer.join(timeout=30)

    # -- what the gateway records --------------------------------------------------------------------------------
    def record_answers(self, answers: list[dict]) -> Future:
        """Answers as given ({response_id, user_id, model_version, prompt, completion, skill, arm, sampling, cut}):
        kept for the feedback window (to join feedback to), and each one an unrated event. `sampling`: the
        {"temperature", "seed"} of an explored answer, None for a greedy one; `cut` (optional): the client's
        max_tokens or stop text ended it. Both are kept as how it was decoded."""
        now, stamp = time.time(), _stamp()
        answers = [{**a, "sampling": _decoded(a)} for a in answers]

        def write(conn):
            _make_room(conn, self._room)
            conn.executemany("INSERT INTO answers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
                (a["response_id"], now, a["user_id"], a["model_version"], a["prompt"], a["completion"],
                 a["skill"], a["arm"], a["sampling"] and json.dumps(a["sampling"])) for a in answers])
            conn.executemany("INSERT INTO events (event) VALUES (?)", [
                (json.dumps(_event(a, a["response_id"], stamp, a["user_id"], None, None, None, "user", {})),)
                for a in answers])

        return self.submit(write)

    def record_feedback(self, response_id: str, rating: str | None, correction: str | None, comment: str | None,
                        source: str, user_id: str | None, meta: dict, event_id: str | None = None,
                        skill: str | None = None) -> Future:
        """A feedback joined with the answer it is about; the future gives its event id (the client's own, when it
        sent one: the warehouse then keeps a retried feedback once). `skill`: the app's name for the kind of question,
        else the recipe's slice of the prompt."""
        import uuid

        event_id, stamp, oldest = event_id or str(uuid.uuid4()), _stamp(), time.time() - self.window_seconds

        def write(conn):
            row = conn.execute("SELECT user_id, model_version, prompt, completion, skill, arm, sampling FROM answers "
                               "WHERE response_id = ? AND at >= ?", (response_id, oldest)).fetchone()
            if row is None:
                age = response_age_seconds(response_id)
                hours = self.window_seconds / 3600
                raise UnknownResponse(
                    f"response {response_id!r} was given more than {hours:g} hours ago: feedback on it has expired"
                    if age is not None and age > self.window_seconds else
                    f"no answer with response_id {response_id!r} was given by this gateway")
            _make_room(conn, self._room)
            answer = dict(zip(("user_id", "model_version", "prompt", "completion", "skill", "arm", "sampling"), row,
                              strict=True))
            answer["skill"] = skill or answer["skill"]
            answer["sampling"] = answer["sampling"] and json.loads(answer["sampling"])
            event = _event({**answer, "response_id": response_id}, event_id, stamp, user_id or answer["user_id"],
                           rating, correction, comment, source, meta)
            conn.execute("INSERT INTO events (event) VALUES (?)", (json.dumps(event),))
            return event_id

        return self.submit(write)

    def forget(self, scope) -> dict[str, int]:
        """Delete the answers and events in `scope` (privacy/scope.py) from the log, between flushes (a flush under
        way writes its batch first: the deletion's own pass over the batch files finds it there)."""
        from ..privacy.gateway_log import forget_logged

        with self._flush_lock:
            return forget_logged(self.path, scope)

    def pending(self) -> int:
        """Events committed and not yet written into a batch file."""
        return self.submit(lambda conn: conn.execute(
            "SELECT count(*) FROM events e LEFT JOIN batches b ON e.batch = b.name "
            "WHERE e.batch IS NULL OR b.written = 0").fetchone()[0]).result()

    # -- flushing into the object store --------------------------------------------------------------------------
    def flush(self, write_file: Callable[[str, bytes], None], prefix: str = "serve") -> list[str]:
        """Write the events committed so far into one batch file (`write_file(name, parquet_bytes)`); returns the
        names written. A batch that a killed flush left unwritten is written first, under its own name."""
        names, sealed = [], False
        with self._flush_lock:
            while True:
                name, new = self.submit(lambda conn, may=not sealed: _seal(conn, prefix, may)).result()
                if name is None:
                    break
                sealed = sealed or new
                events = self.submit(lambda conn, n=name: [json.loads(e) for (e,) in conn.execute(
                    "SELECT event FROM events WHERE batch = ? ORDER BY seq", (n,))]).result()
                write_file(name, _parquet(events))
                self.submit(lambda conn, n=name: _written(conn, n, time.time() - self.window_seconds)).result()
                names.append(name)
        return names


def _seal(conn, prefix: str, may_seal: bool) -> tuple[str | None, bool]:
    """(the batch to write next, whether it is new): one a killed flush left unwritten, else (when `may_seal`) one
    of every unbatched event; events that arrive while it is written wait for the next flush."""
    row = conn.execute("SELECT name FROM batches WHERE written = 0 ORDER BY name LIMIT 1").fetchone()
    if row:
        return row[0], False
    first = conn.execute("SELECT min(seq), count(*) FROM events WHERE batch IS NULL").fetchone()
    if not may_seal or not first[1]:
        return None, False
    name = f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{first[0]:010d}.parquet"
    conn.execute("UPDATE events SET batch = ? WHERE batch IS NULL", (name,))
    conn.execute("INSERT INTO batches VALUES (?, ?, 0)", (name, first[1]))
    return name, True


def _written(conn, name: str, oldest: float) -> None:
    conn.execute("UPDATE batches SET written = 1 WHERE name = ?", (name,))
    conn.execute("DELETE FROM events WHERE batch = ?", (name,))
    conn.execute("DELETE FROM answers WHERE at < ?", (oldest,))


def _decoded(answer: dict) -> dict | None:
    """How an answer was decoded where it is not the model's whole greedy answer: {"temperature", "seed"} when
    sampled, {"cut": true} when the client's options cut it; None for a whole greedy answer."""
    how = {**(answer["sampling"] or {}), **({"cut": True} if answer.get("cut") else {})}
    return how or None


def _event(answer: dict, event_id: str, ts: str, user_id: str, rating, correction, comment, source,
           meta: dict) -> dict:
    """The schema-v1 event of an answer, or of a feedback on it; its meta says how an explored answer was sampled,
    so that learning from its thumbs can tell it from the champion's greedy choice, and marks an answer the
    client's max_tokens or stop text cut (`cut`), whose thumbs the loop does not count."""
    sampled = answer["sampling"] or {}
    how = ({"temperature": float(sampled["temperature"]), "sample_seed": int(sampled["seed"])}
           if "temperature" in sampled else {})
    how.update({"cut": True} if sampled.get("cut") else {})
    return {"schema_version": SCHEMA_VERSION, "event_id": event_id, "ts": ts, "user_id": user_id,
            "model_version": answer["model_version"], "prompt": answer["prompt"], "completion": answer["completion"],
            "rating": rating, "correction": correction, "comment": comment, "source": source,
            "skill": answer["skill"],
            "meta": {**meta, "response_id": answer["response_id"], "arm": answer["arm"], "served_by": "rmi serve",
                     **how}}


def _parquet(events: list[dict]) -> bytes:
    import io

    import polars as pl

    frame = pl.DataFrame(events, infer_schema_length=None).select(FIELDS)
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    return buffer.getvalue()


def _stamp() -> str:
    return datetime.now(UTC).isoformat()
