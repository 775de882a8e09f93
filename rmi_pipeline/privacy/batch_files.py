"""A deletion in the feedback batch files: each batch's original (feedback/incoming/, and the copy a team keeps under
RMI_REDACT_ORIGINALS_URL), its valid events (validated/), its quarantine (raw rows) and the summary that counts them.

Each file is rewritten without the rows in scope, whole, in one write (readers never see half a file), and only when
it holds one. Quarantined rows are matched through the original (the row numbers parsing gave them) while it is
there, so the quarantine is rewritten first and the original last: a deletion killed between them matches the same
rows again. A row nothing can date (retention) is as old as its file.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Callable

from ..resources import layout
from ..resources.storage import ObjectStore
from ..schema import is_batch_file
from .ledger import Ledger
from .scope import Scope

BOM = b"\xef\xbb\xbf"


def batch_names(storage: ObjectStore) -> list[str]:
    """Every batch with a file in incoming/, validated/ or quarantine/."""
    names = {key.rsplit("/", 1)[-1] for key in storage.list(layout.INCOMING)}
    for key in storage.list(layout.VALIDATED):
        file = key.rsplit("/", 1)[-1]
        names.add(file.removesuffix(".summary.json") if file.endswith(".summary.json")
                  else file.removesuffix(".parquet"))
    names |= {key.rsplit("/", 1)[-1].removesuffix(".quarantine.jsonl") for key in storage.list(layout.QUARANTINE)}
    return sorted(n for n in names if is_batch_file(n))


def forget_in_batches(storage: ObjectStore, originals: ObjectStore | None, scope: Scope, ledger: Ledger) -> None:
    """Every batch's files without the rows in `scope`, each rewrite counted in `ledger`."""
    for name in batch_names(storage):
        forget_in_batch(storage, originals, name, scope, ledger)


def forget_in_batch(storage: ObjectStore, originals: ObjectStore | None, name: str, scope: Scope,
                    ledger: Ledger) -> None:
    original_key = layout.incoming(name)
    stores = [(storage, "incoming_rows"), *([(originals, "originals_rows")] if originals else [])]
    # which rows of the original are in scope, by the row numbers its quarantine names them by
    doomed_rows: set[int] | None = None
    for store, _ in stores:
        data = _read(store, original_key)
        if data:
            _, rows = _without(name, data, scope, lambda s=store: _older(s, original_key, scope))
            doomed_rows = (doomed_rows or set()) | rows
    key = layout.quarantine(name)
    if data := _read(storage, key):
        kept, gone = [], 0
        for line in data.decode("utf-8").splitlines():
            if _quarantined_in_scope(line, scope, doomed_rows, lambda: _older(storage, key, scope)):
                gone += 1
            else:
                kept.append(line)
        if gone:
            ledger.rewrite(storage, key, data, "".join(line + "\n" for line in kept).encode(),
                           {"quarantined_rows": gone, "batch_files_rewritten": 1})
    key = layout.validated(name)
    if data := _read(storage, key):
        import polars as pl

        frame = pl.read_parquet(io.BytesIO(data))
        doomed = scope.rows(frame).fill_null(False)
        if doomed.any():
            ledger.write_parquet(storage, key, data, frame.filter(~doomed),
                                 {"validated_rows": int(doomed.sum()), "batch_files_rewritten": 1})
    for store, label in stores:
        if data := _read(store, original_key):
            rewritten, rows = _without(name, data, scope, lambda s=store: _older(s, original_key, scope))
            if rows:
                ledger.rewrite(store, original_key, data, rewritten, {label: len(rows), "batch_files_rewritten": 1})
    _recount(storage, name)


def _quarantined_in_scope(line: str, scope: Scope, doomed_rows: set[int] | None, old: Callable[[], bool]) -> bool:
    """A quarantine line ({"row", "reason", "raw"}) is in scope when its row of the original is, or its raw text
    says so (the original gone); undated, by the quarantine file's age."""
    try:
        entry = json.loads(line)
    except ValueError:
        entry = {"raw": line}
    raw = entry.get("raw") if isinstance(entry, dict) else line
    said = scope.raw(raw) if isinstance(raw, str) else None
    if said:
        return True
    row = entry.get("row") if isinstance(entry, dict) else None
    if doomed_rows is not None and isinstance(row, int):
        return row in doomed_rows
    return old() if said is None else False


def _without(name: str, data: bytes, scope: Scope, old: Callable[[], bool]) -> tuple[bytes, set[int]]:
    """(the original without the rows in scope, their row numbers as parsing counts them: non-blank lines, or
    Parquet rows, from 1). A file parsing could not read is one row, in scope or not as a whole."""
    if name.endswith(".parquet"):
        return _parquet_without(data, scope, old)
    if name.endswith(".gz"):
        try:
            text = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            return _unreadable(data, scope, old)
    else:
        text = data
    kept, rows, row = [], set(), 0
    for line in text.split(b"\n"):
        if line.strip():
            row += 1
            said = scope.raw(line.removeprefix(BOM).decode("utf-8", "replace").strip())
            if said or (said is None and old()):
                rows.add(row)
                continue
        kept.append(line)
    body = b"\n".join(kept)
    return (gzip.compress(body) if name.endswith(".gz") else body), rows


def _parquet_without(data: bytes, scope: Scope, old: Callable[[], bool]) -> tuple[bytes, set[int]]:
    import polars as pl

    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: B036 - polars raises a Rust panic (a BaseException) on some garbage
        return _unreadable(data, scope, old)
    doomed = scope.rows(frame)
    if doomed.null_count():
        doomed = doomed.fill_null(old())
    if not doomed.any():
        return data, set()
    rows = {i + 1 for i in doomed.arg_true().to_list()}
    buffer = io.BytesIO()
    frame.filter(~doomed).write_parquet(buffer)
    return buffer.getvalue(), rows


def _unreadable(data: bytes, scope: Scope, old: Callable[[], bool]) -> tuple[bytes, set[int]]:
    said = scope.raw(data.decode("utf-8", "replace"))
    return (b"", {1}) if said or (said is None and old()) else (data, set())


def _recount(storage: ObjectStore, name: str) -> None:
    """The batch's summary counts what its files now hold (rows in = valid + quarantined + repeated), so a batch
    ingested again still adds up; its other fields (the check, redaction counts) stay."""
    key = layout.validated_summary(name)
    if not storage.exists(key):
        return
    summary = storage.read_json(key)
    valid = _parquet_rows(storage, layout.validated(name))
    data = _read(storage, layout.quarantine(name))
    quarantined = len(data.decode("utf-8").splitlines()) if data else 0
    repeated = summary.get("duplicates_in_batch", 0)
    rows_in = _original_rows(storage, name)
    if rows_in is not None:  # the repeats left are the original's rows neither valid nor quarantined
        repeated = max(0, rows_in - valid - quarantined)
    counted = {"valid": valid, "quarantined": quarantined, "duplicates_in_batch": repeated,
               "rows_in": valid + quarantined + repeated}
    if any(summary.get(k) != v for k, v in counted.items()):
        storage.write_json(key, {**summary, **counted})


def _original_rows(storage: ObjectStore, name: str) -> int | None:
    """The rows of the batch's original as parsing counts them; None when it is gone (emptied once redacted) or
    unreadable."""
    data = _read(storage, layout.incoming(name))
    if not data:
        return None
    try:
        if name.endswith(".parquet"):
            return _parquet_rows(storage, layout.incoming(name))
        text = gzip.decompress(data) if name.endswith(".gz") else data
    except Exception:  # noqa: BLE001 - unreadable: one quarantined row, counted as it was
        return None
    return sum(1 for line in text.split(b"\n") if line.strip())


def _parquet_rows(storage: ObjectStore, key: str) -> int:
    import pyarrow.parquet as pq

    data = _read(storage, key)
    return pq.ParquetFile(io.BytesIO(data)).metadata.num_rows if data else 0


def _read(store: ObjectStore, key: str) -> bytes | None:
    return store.read_bytes(key) if store.exists(key) else None


def _older(store: ObjectStore, key: str, scope: Scope) -> bool:
    """Whether a file was last written before the retention cut-off (for rows it does not date)."""
    from datetime import UTC

    if scope.before is None:
        return False
    fs, _ = store._fs()
    modified = fs.modified(store.path(key))
    return (modified.replace(tzinfo=UTC) if modified.tzinfo is None else modified) < scope.before
