"""The two jobs of the loop: ingest one feedback batch, and run one improvement cycle."""

from dagster import AssetSelection, define_asset_job

from ..assets import CYCLE, FEEDBACK
from ..partitions import feedback_batches

ingest_feedback = define_asset_job(
    "ingest_feedback",
    selection=AssetSelection.assets(*FEEDBACK),
    partitions_def=feedback_batches,
    description="Validate one landed feedback batch and land its events in the warehouse.",
)

improvement_cycle = define_asset_job(
    "improvement_cycle",
    selection=AssetSelection.assets(*CYCLE),
    description="Dataset from all feedback -> candidate -> evaluation against the champion -> promotion.",
)
