"""The one partitioning of the loop: a feedback batch (one file landed in feedback/incoming/)."""

from dagster import DynamicPartitionsDefinition

feedback_batches = DynamicPartitionsDefinition(name="feedback_batch")


def can_be_partition(name: str) -> bool:
    """Dagster refuses partition keys with '...' or control characters; one such name would fail every tick."""
    return "..." not in name and all(ord(c) >= 32 for c in name)
