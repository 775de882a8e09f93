"""Validated feedback ingestion against a raw DuckDB copy of the same files; one batch's ingest as the warehouse grows.

    python bench/ingest.py                              1M-event batches (Parquet, JSON lines); warehouse to 10M
    python bench/ingest.py --events 200000 --largest 1000000      a quicker run

Part 1 times, on the same 1M synthetic events (arithmetic feedback, 0.2% bad rows, 0.1% repeated ids, 3% with a
comment in words of which one in ten holds personal data (tests/pii_corpus.py), and in the JSON lines 0.05% garbled
lines), side by side in one process:
  raw, memory      CREATE TABLE AS SELECT * FROM read_parquet / read_json, in an in-memory DuckDB
  validated, memory   schema.parse_batch: parse, the GX suite, quarantine reasons, the valid events (in memory);
                   JSON lines in bulk (schema/jsonl.py: DuckDB decodes the plain lines, Python the odd ones)
  raw, file        the same raw copy into a DuckDB file, closed (written to disk)
  end to end       what the two ingest assets do (check_batch + land_batch): parse, the suite, the recipe's
                   slices, redaction of personal data (RMI_REDACT, on by default), validated Parquet + quarantine
                   written to the object store, dedupe into the warehouse; and the same with RMI_REDACT=false,
                   whose quarantine must be the same rows with the same reasons
The one-time cost of a process (GX import and compiling the suite to SQL) is paid in a warm-up and printed apart.
Then the JSON lines of --reference events (default 100k) through both routes beside their raw copy: the bulk route
and the row-by-row reference it must agree with (too slow to time at 1M), and a check that both gave the same.

Part 2 times one batch (--batch events as Parquet, through check_batch + land_batch) with the warehouse at 10k,
100k, 1M and 10M events (--largest caps it). The warehouse is grown with pre-built valid events, not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the corpus of personal data


COMMENTS = ("wrong", "that's not right", "close, but the last digit is off", "almost!", "thanks, 10/10",
            "I asked this 2 times already", "the answer for 1234+1 should be 1235", "great 🙂", "nope", "why?")


def synth(n: int, seed: int, start: int = 0, bad: float = 0.002, repeated: float = 0.001,
          commented: float = 0.03, personal: float = 0.1) -> pl.DataFrame:
    """Schema v1 events as a client sends them: arithmetic prompts of tiers 1-8, thumbs, corrections, meta, and
    `commented` of them a comment in words, `personal` of those with personal data in it."""
    from pii_corpus import rows

    rng = np.random.default_rng(seed)
    with_data = [e["comment"] for e in rows(500, 0, seed=seed)[0]]
    comments = np.where(rng.random(n) < personal, rng.choice(with_data, n), rng.choice(COMMENTS, n))
    tier = rng.integers(1, 9, n)
    low = np.where(tier == 1, 0, 10 ** (tier - 1))
    a, b = rng.integers(low, 10**tier), rng.integers(low, 10**tier)
    sub = rng.random(n) < 0.5
    a, b = np.where(sub, np.maximum(a, b), a), np.where(sub, np.minimum(a, b), b)
    truth = np.where(sub, a - b, a + b)
    right = rng.random(n) < 0.7
    answer = np.where(right, truth, truth + rng.integers(1, 10, n))
    rating = np.where(rng.random(n) < 0.05, None, np.where(right ^ (rng.random(n) < 0.05), "up", "down"))
    ids = np.arange(start, start + n)
    ids[rng.random(n) < repeated] = start  # a client that sent one event again
    frame = pl.DataFrame({"i": ids, "a": a, "b": b, "sub": sub, "answer": answer, "truth": truth,
                          "rating": pl.Series(rating.tolist(), dtype=pl.String), "user": rng.integers(0, 5000, n),
                          "model": rng.integers(1, 6, n), "client": rng.choice(["web", "ios", "android"], n),
                          "report": rng.random(n) < 0.05, "fix": rng.random(n) < 0.6, "odd": rng.random(n),
                          "comment": pl.Series(np.where(rng.random(n) < commented, comments, None).tolist(),
                                               dtype=pl.String)})
    out = frame.select(
        schema_version=pl.lit(1),
        event_id=pl.format("ev-{}-{}", pl.lit(seed), "i"),
        ts=(pl.datetime(2026, 11, 1, time_zone="UTC") + pl.duration(seconds=pl.col("i") % 2_000_000))
        .dt.to_string("%Y-%m-%dT%H:%M:%SZ"),
        user_id=pl.format("u{}", "user"),
        model_version=pl.col("model").cast(pl.String),
        prompt=pl.format("{}{}{}=", "a", pl.when("sub").then(pl.lit("-")).otherwise(pl.lit("+")), "b"),
        completion=pl.col("answer").cast(pl.String),
        rating="rating",
        correction=pl.when((pl.col("rating") == "down") & pl.col("fix")).then(pl.col("truth").cast(pl.String)),
        comment=pl.col("comment").cast(pl.String),
        source=pl.when("report").then(pl.lit("report")).otherwise(pl.lit("user")),
        skill=pl.when("sub").then(pl.lit("sub")).otherwise(pl.lit("add")),
        meta=pl.struct(client="client"),
        odd=pl.col("odd"),
    )
    broken = pl.col("odd") < bad  # a buggy client: a rating outside the domain, a date without a time zone
    return out.with_columns(
        rating=pl.when(broken & (pl.col("odd") < bad / 2)).then(pl.lit("meh")).otherwise("rating"),
        ts=pl.when(broken & (pl.col("odd") >= bad / 2)).then(pl.col("ts").str.strip_suffix("Z")).otherwise("ts"),
    ).drop("odd")


def write_batches(frame: pl.DataFrame, folder: Path, garbled: float = 0.0005) -> dict[str, bytes]:
    buf = folder / "batch.parquet"
    frame.write_parquet(buf)
    lines = frame.write_ndjson().encode().split(b"\n")
    step = int(1 / garbled)
    lines = [line[: len(line) // 2] if i % step == step - 1 else line for i, line in enumerate(lines)]
    (folder / "batch.jsonl").write_bytes(b"\n".join(lines))
    return {name: (folder / name).read_bytes() for name in ("batch.parquet", "batch.jsonl")}


def raw_copy(path: Path, database: str) -> float:
    reader = f"read_parquet('{path}')" if path.suffix == ".parquet" else \
        f"read_json('{path}', format = 'newline_delimited', ignore_errors = true)"
    if database != ":memory:" and os.path.exists(database):
        os.remove(database)
    start = time.perf_counter()
    conn = duckdb.connect(database)
    conn.execute(f"CREATE TABLE feedback AS SELECT * FROM {reader}")
    conn.close()
    return time.perf_counter() - start


def median_of(reps: int, fn) -> float:
    return statistics.median(fn() for _ in range(reps))


class Pipeline:
    """The ingest assets' own functions on a local object store and warehouse."""

    def __init__(self, root: Path):
        from rmi_pipeline.resources.storage import ObjectStore
        from rmi_pipeline.settings import Privacy, Settings

        self.root, self.settings = root, Settings()
        self.unredacted = Settings(privacy=Privacy(redact=False))
        self.storage = ObjectStore(url=f"file://{root / 'store'}")
        self.fresh_warehouse()

    def fresh_warehouse(self):
        from rmi_pipeline.resources.warehouse import Warehouse

        path = self.root / "warehouse.duckdb"
        for leftover in (path, path.with_suffix(".duckdb.wal")):
            leftover.unlink(missing_ok=True)
        self.warehouse = Warehouse(path=str(path))
        return self.warehouse

    def ingest(self, name: str, data: bytes, redact: bool = True) -> tuple[float, float, dict]:
        """(seconds to check, seconds to land, counts) for one batch, as the two assets run it."""
        from rmi_pipeline.assets.feedback import check_batch, land_batch
        from rmi_pipeline.resources import layout

        self.storage.write_bytes(layout.incoming(name), data)
        start = time.perf_counter()
        check_batch(self.storage, name, self.settings if redact else self.unredacted)
        checked = time.perf_counter()
        counts = land_batch(self.storage, self.warehouse, name)
        return checked - start, time.perf_counter() - checked, counts


def part1(pipe: Pipeline, n: int, reps: int, folder: Path) -> None:
    from rmi_pipeline.assets.feedback import add_slices
    from rmi_pipeline.resources import layout
    from rmi_pipeline.schema import parse_batch

    frame = synth(n, seed=1)
    files = write_batches(frame, folder)
    print(f"\n{n:,} events per batch; {reps} runs each, median seconds\n")
    print(f"{'':13} {'raw mem':>8} {'valid mem':>9} {'ratio':>6} | {'raw file':>8} {'end to end':>10} {'ratio':>6} "
          f"| {'slices':>6} {'ratio w/o':>9} | {'unredacted':>10} {'ratio':>6} | events/s validated (mem, end "
          "to end)")
    for name, data in files.items():
        path = folder / name
        raw_mem = median_of(reps, lambda p=path: raw_copy(p, ":memory:"))
        raw_file = median_of(reps, lambda p=path: raw_copy(p, str(folder / "raw.duckdb")))
        parse = median_of(reps, lambda nm=name, p=path: _timed(
            lambda: parse_batch(nm, p.read_bytes(), nm, pipe.settings.feedback.max_text_chars)))
        parsed = parse_batch(name, data, name, pipe.settings.feedback.max_text_chars)
        slices = median_of(reps, lambda f=parsed.frame: _timed(add_slices, f, pipe.settings.recipe))
        runs, plain = [], []
        for rep in range(reps):
            for redact, times in ((True, runs), (False, plain)):
                pipe.fresh_warehouse()
                check, land, counts = pipe.ingest(f"{rep}-{redact}-{name}", data, redact)
                times.append(check + land)
                assert counts["rows_in"] == counts["ingested"] + counts["duplicates"] + counts["quarantined"] == n
        e2e, unredacted = statistics.median(runs), statistics.median(plain)
        print(f"{name:13} {raw_mem:8.2f} {parse:9.2f} {raw_mem / parse:6.2f} | {raw_file:8.2f} {e2e:10.2f} "
              f"{raw_file / e2e:6.2f} | {slices:6.2f} {raw_file / (e2e - slices):9.2f} | {unredacted:10.2f} "
              f"{raw_file / unredacted:6.2f} | {n / parse:,.0f}  {n / e2e:,.0f}")
        summary = pipe.storage.read_json(layout.validated_summary(f"0-True-{name}"))
        same = _quarantine(pipe, f"0-True-{name}") == _quarantine(pipe, f"0-False-{name}")
        print(f"{'':13} rows in {counts['rows_in']:,}: ingested {counts['ingested']:,}, duplicates "
              f"{counts['duplicates']:,}, quarantined {counts['quarantined']:,} (the same rows and reasons with "
              f"redaction and without: {same})")
        print(f"{'':13} redacted {summary['redacted_total']:,} ({summary['redacted']}); Presidio read "
              f"{summary['redaction_texts_read']:,} distinct texts of {summary['redaction_cells']:,} cells")
    print("ratio = raw seconds / validated seconds; 'ratio w/o' leaves out the recipe's slices (tier per prompt); "
          "'unredacted': end to end with RMI_REDACT=false")


def _quarantine(pipe: Pipeline, name: str) -> list[tuple]:
    from rmi_pipeline.resources import layout

    lines = pipe.storage.read_bytes(layout.quarantine(name)).decode().splitlines()
    return [(q["row"], q["reason"]) for q in map(json.loads, lines)]


def jsonl_routes(pipe: Pipeline, n: int, reps: int, folder: Path) -> None:
    """The JSON lines routes side by side on one smaller file: bulk, row by row, and the raw read_json copy."""
    from rmi_pipeline.schema import parse_batch

    small = folder / "reference"
    small.mkdir(exist_ok=True)
    data = write_batches(synth(n, seed=2), small)["batch.jsonl"]
    path, chars = small / "batch.jsonl", pipe.settings.feedback.max_text_chars
    raw = median_of(reps, lambda: raw_copy(path, ":memory:"))
    bulk = median_of(reps, lambda: _timed(lambda: parse_batch("b.jsonl", path.read_bytes(), "b", chars)))
    by_row = median_of(reps, lambda: _timed(lambda: parse_batch("b.jsonl", path.read_bytes(), "b", chars,
                                                                by_row=True)))
    a, b = parse_batch("b.jsonl", data, "b", chars), parse_batch("b.jsonl", data, "b", chars, by_row=True)
    same = a.frame.equals(b.frame) and a.quarantined == b.quarantined and a.duplicates == b.duplicates
    print(f"\nJSON lines, {n:,} events, median of {reps}: raw read_json {raw:.2f} s | bulk {bulk:.2f} s, "
          f"ratio {raw / bulk:.2f} | row by row {by_row:.2f} s, ratio {raw / by_row:.2f} | bulk "
          f"{by_row / bulk:.1f}x faster; same events and quarantine: {same}")


def part2(pipe: Pipeline, batch: int, largest: int, reps: int, folder: Path) -> None:
    from rmi_pipeline.schema import EVENT_COLUMNS

    sizes = [s for s in (10_000, 100_000, 1_000_000, 10_000_000) if s <= largest]
    print(f"\none batch of {batch:,} events (Parquet, check + land) as the warehouse grows; median of {reps}\n")
    print(f"{'warehouse events':>16} {'ingest s':>9} {'land s':>7} {'x at 10k':>9}")
    pipe.fresh_warehouse()
    size, first, seed = 0, None, 100
    for target in sizes:
        while size < target:  # grow with valid events, 1M at a time
            n = min(1_000_000, target - size)
            grown = synth(n, seed=seed, bad=0, repeated=0)
            seed += 1
            pipe.warehouse.ingest(grown.with_columns(
                ts=pl.col("ts").str.to_datetime(time_zone="UTC"), meta=pl.col("meta").struct.json_encode(),
                batch_id=pl.lit("growth"), tier=pl.lit(None, dtype=pl.Int64)).select(list(EVENT_COLUMNS)))
            size += n
        times = []
        for _ in range(reps):
            data, name = _parquet(synth(batch, seed=seed)), f"grow-{seed}.parquet"
            seed += 1
            check, land, counts = pipe.ingest(name, data)
            times.append((check + land, land))
            assert counts["warehouse_events"] - counts["ingested"] == size, (counts, size)
            with pipe.warehouse.connect() as conn:  # back to `target` events for the next run
                conn.execute("DELETE FROM feedback_events WHERE batch_id = ?", [name])
        total, land = statistics.median(t for t, _ in times), statistics.median(lt for _, lt in times)
        first = first or total
        print(f"{size:>16,} {total:9.2f} {land:7.2f} {total / first:9.2f}")


def _parquet(frame: pl.DataFrame) -> bytes:
    import io

    buf = io.BytesIO()
    frame.write_parquet(buf)
    return buf.getvalue()


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events per batch in part 1 (0: skip)")
    parser.add_argument("--reference", type=int, default=100_000,
                        help="events in the JSON lines file timed through both routes (0: skip)")
    parser.add_argument("--batch", type=int, default=100_000, help="events per batch in part 2")
    parser.add_argument("--largest", type=int, default=10_000_000, help="largest warehouse in part 2 (0: skip)")
    parser.add_argument("--reps", type=int, default=3, help="runs per figure (the median is printed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rmi-ingest-") as tmp:
        folder = Path(tmp)
        os.environ.setdefault("RMI_HOME", str(folder / "home"))  # a cold start: the suite compiled anew
        pipe = Pipeline(folder)
        start = time.perf_counter()
        pipe.ingest("warm-up.parquet", _parquet(synth(1000, seed=0)))
        print(f"once per process (GX import, the suite compiled to SQL, the recipe): "
              f"{time.perf_counter() - start:.1f} s")
        if args.events:
            part1(pipe, args.events, args.reps, folder)
        if args.reference:
            jsonl_routes(pipe, args.reference, args.reps, folder)
        if args.largest:
            part2(pipe, args.batch, args.largest, args.reps, folder)


if __name__ == "__main__":
    main()
