"""The one partitioning of the loop: a feedback batch (one file landed in feedback/incoming/)."""

from dagster import DynamicPartitionsDefinition

feedback_batches = DynamicPartitionsDefinition(name="feedback_batch")
