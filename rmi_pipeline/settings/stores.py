"""Where the loop keeps what it makes besides RMI_HOME: the object store and the warehouse."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from .base import Group


class Storage(Group):
    """The object store: feedback batches, datasets, checkpoints (fsspec: a folder or s3://; credentials are the
    standard AWS_* variables, never RMI_*)."""

    model_config = SettingsConfigDict(env_prefix="RMI_STORAGE_")

    url: str | None = Field(default=None, description="Object store root; default file://HOME/store.")
    s3_endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint for an s3:// "
                                        "RMI_STORAGE_URL (MinIO, a local S3).")


class Warehouse(Group):
    """The feedback warehouse: a DuckLake table, its catalog in SQLite by default or in PostgreSQL."""

    model_config = SettingsConfigDict(env_prefix="RMI_WAREHOUSE_")

    path: Path | None = Field(default=None, description="The warehouse's catalog file (SQLite, a DuckLake catalog); "
                              "default HOME/warehouse.sqlite.")
    catalog: str | None = Field(default=None, description="A DuckLake catalog in PostgreSQL that many writers share, "
                                "as 'postgres:dbname=... host=... user=...'; the password from PGPASSWORD, never "
                                "here. Default the file RMI_WAREHOUSE_PATH.")
    data_url: str | None = Field(default=None, description="Where the warehouse's Parquet files live: a folder or "
                                 "s3://bucket/prefix/; default HOME/warehouse_files/.")
    lock_timeout_seconds: float = Field(default=300.0, description="How long a writer retries commits that lost to "
                                        "another writer's before it gives up.")
