"""Feedback where teams already collect it, as schema-v1 feedback batches: Langfuse scores and traces
(langfuse.py), Arize Phoenix annotations and spans (phoenix.py), OpenTelemetry GenAI evaluation events and spans
in OTLP JSON (otel.py); what they share is in common.py. `rmi feedback import` lands the batch they make.
"""

from __future__ import annotations

from pathlib import Path

from . import langfuse, otel, phoenix
from .common import DOWN_LABELS, UP_LABELS, Conversion, ExportError, Mapping, labels

TOOLS = {"langfuse": langfuse.convert, "phoenix": phoenix.convert, "otel": otel.convert}


def convert(tool: str, paths: list[Path], mapping: Mapping) -> Conversion:
    """One tool's export files as feedback events; ExportError names the file, record and field it refuses."""
    if tool not in TOOLS:
        raise ValueError(f"no importer for {tool!r}: one of {', '.join(TOOLS)}")
    try:
        return TOOLS[tool](list(paths), mapping)
    except RecursionError:  # JSON that parses can still nest deeper than walking it allows
        raise ExportError(f"a {tool} export nested too deeply to be feedback") from None


__all__ = ["DOWN_LABELS", "TOOLS", "UP_LABELS", "Conversion", "ExportError", "Mapping", "convert", "labels"]
