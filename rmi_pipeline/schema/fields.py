"""Feedback event schema v1: the fields a client sends, the columns an event is stored with, and the batch files.

Parsing, the expectation suite, the warehouse and the tests all read these names from here.
"""

from __future__ import annotations

SCHEMA_VERSION = 1
SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")  # a feedback batch file; any other file in incoming/ is not one

# an event as a client sends it; unknown fields are kept in meta
FIELDS = ("schema_version", "event_id", "ts", "user_id", "model_version", "prompt", "completion", "rating",
          "correction", "comment", "source", "skill", "meta")
TEXT_FIELDS = ("event_id", "user_id", "model_version", "prompt", "completion", "rating", "correction", "comment",
               "source", "skill")
REQUIRED_TEXT = ("event_id", "user_id", "model_version", "prompt", "completion")
TYPED = ("rating", "correction", "comment", "skill", "meta")  # optional: null is fine, another JSON type is not
# meta keys `rmi serve` writes itself (serving/log.py): ids and how an answer was sampled or cut, never a user's words
GATEWAY_META = ("response_id", "arm", "served_by", "temperature", "sample_seed", "cut")

# the rows the suite validates, as parsing builds them (staging columns and their DuckDB types)
STAGING = {"row": "BIGINT", "schema_version": "BIGINT", "ts_text": "VARCHAR", "ts_value": "TIMESTAMPTZ",
           **{name: "VARCHAR" for name in TEXT_FIELDS}, "meta": "VARCHAR",
           **{f"{name}_type": "VARCHAR" for name in TYPED}}

# an event as the warehouse stores it, in order: the fields, the batch it came in, and its tier, which is not in
# schema v1 (filled at ingest from the recipe; NULL when the prompt is not one the recipe knows)
EVENT_COLUMNS = {"event_id": "VARCHAR", "schema_version": "INTEGER", "ts": "TIMESTAMPTZ", "user_id": "VARCHAR",
                 "model_version": "VARCHAR", "prompt": "VARCHAR", "completion": "VARCHAR", "rating": "VARCHAR",
                 "correction": "VARCHAR", "comment": "VARCHAR", "source": "VARCHAR", "skill": "VARCHAR",
                 "meta": "JSON", "batch_id": "VARCHAR", "tier": "INTEGER"}


def staging_schema():
    """The staging columns as Arrow types, whichever route built the rows."""
    import pyarrow as pa

    types = {"BIGINT": pa.int64(), "VARCHAR": pa.string(), "TIMESTAMPTZ": pa.timestamp("us", tz="UTC")}
    return pa.schema([(name, types[kind]) for name, kind in STAGING.items()])


def is_batch_file(name: str) -> bool:
    return name.endswith(SUFFIXES) and not name.startswith(".")
