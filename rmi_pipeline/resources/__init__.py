"""Dagster resources: the loop's settings and its handles on storage, the warehouse, the model registry, the
training launcher and alerts; layout.py says where each thing lives in the stores."""

from __future__ import annotations

from dagster import EnvVar

from ..settings import Settings
from .notifier import Notifier
from .registry import ModelRegistry
from .storage import ObjectStore
from .training_launcher import training_launcher_resource
from .warehouse import Warehouse


def build_resources(settings: Settings) -> dict:
    """The resources of the loop, from the one settings object, which is itself the resource `settings`: assets
    and sensors read their knobs from it instead of reading the environment again."""
    return {
        "settings": settings,
        "storage": ObjectStore(url=settings.resolved_storage_url, endpoint_url=settings.storage.s3_endpoint_url),
        # sealed: only evaluation assets take it
        "eval_store": ObjectStore(url=settings.resolved_eval_url, endpoint_url=settings.storage.s3_endpoint_url),
        "warehouse": Warehouse.from_settings(settings),
        # the webhook is a secret: Dagster shows it as an environment variable, never its value
        "notifier": Notifier(webhook_url=EnvVar("RMI_ALERT_WEBHOOK_URL") if settings.alerts.webhook_url else None,
                             ui_url=settings.ui.url, timeout_seconds=settings.alerts.timeout_seconds,
                             state_path=str(settings.resolved_home / "alerts_sent.json")),
        "registry": ModelRegistry(
            tracking_uri=settings.resolved_tracking_uri,
            # a tracking server (http[s]://) stores artifacts itself, e.g. on S3; a database URI needs a root here
            artifact_root=None if settings.resolved_tracking_uri.startswith(("http://", "https://"))
            else f"file://{settings.resolved_home / 'mlartifacts'}",
            model_name=settings.model_name,
            cache_dir=str(settings.cache_dir),
        ),
        "training_launcher": training_launcher_resource(settings),
    }
