"""A deletion in the gateway's write-ahead log (serving/log.py's SQLite file): the answers it keeps for the feedback
window and the events not yet written into a batch file.

Its own connection, beside a running gateway's: SQLite's locks order the two. Deleted rows are overwritten with
zeros where they lay (secure_delete) and the write-ahead file is checkpointed and truncated, so no free page or old
frame still holds them; no VACUUM, which would lock a large log (a week of answers) against the gateway for long.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .scope import Scope


def forget_logged(path: Path, scope: Scope, timeout_seconds: float = 60.0) -> dict[str, int]:
    """Remove the answers and events in `scope` from the log at `path`; how many of each."""
    path = Path(path)
    if not path.exists():
        return {"gateway_log_answers": 0, "gateway_log_events": 0}
    if scope.user_id is not None:
        where = {"answers": "user_id = ?", "events": "json_extract(event, '$.user_id') = ?"}
        params = {"answers": [scope.user_id], "events": [scope.user_id]}
    else:  # answers by the second they were given; events by their ts as the log writes it (UTC, ISO 8601)
        where = {"answers": "at < ?", "events": "json_extract(event, '$.ts') < ?"}
        params = {"answers": [scope.before.timestamp()], "events": [scope.before.isoformat()]}
    gone = {}
    conn = sqlite3.connect(path, timeout=timeout_seconds, isolation_level=None)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not set(where) <= tables:
            return {"gateway_log_answers": 0, "gateway_log_events": 0}
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table in where:
                gone[table] = conn.execute(f"DELETE FROM {table} WHERE {where[table]}", params[table]).rowcount
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        _truncate_wal(conn, timeout_seconds)
    finally:
        conn.close()
    return {"gateway_log_answers": gone["answers"], "gateway_log_events": gone["events"]}


def _truncate_wal(conn, timeout_seconds: float) -> None:
    """Every frame of the write-ahead file into the database, and the file emptied: its older frames may hold the
    deleted rows. A reader in the middle of a transaction holds it back a moment."""
    import time

    deadline = time.monotonic() + timeout_seconds
    while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway log's write-ahead file stayed in use: the deletion is redone by the "
                               "next run")
        time.sleep(0.05)
