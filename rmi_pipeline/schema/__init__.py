"""Feedback event schema v1: its fields (fields.py), reading a batch file into rows (parse.py), the Great
Expectations suite that judges them (expectations.py) and the DuckDB dialect GX compiles it through (gx_duckdb.py).
"""

from .fields import EVENT_COLUMNS, SCHEMA_VERSION, SUFFIXES, is_batch_file
from .parse import ParsedBatch, event_frame, parse_batch, read_rows

__all__ = ["EVENT_COLUMNS", "SCHEMA_VERSION", "SUFFIXES", "ParsedBatch", "event_frame", "is_batch_file",
           "parse_batch", "read_rows"]
