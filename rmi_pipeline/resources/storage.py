"""The object store: one fsspec root (file:// by default, s3:// when a team outgrows one machine).

On S3, credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile,
an instance role), never from Dagster config, so they never show in the UI or in run logs. Only the endpoint
of an S3-compatible server (MinIO, a local S3) is configuration.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field


class ObjectStore(ConfigurableResource):
    """Paths are relative keys like 'feedback/incoming/b1.jsonl' under `url` (file:// or s3://bucket/prefix)."""

    url: str
    endpoint_url: str | None = Field(default=None, description="S3 API endpoint; None: AWS_ENDPOINT_URL_S3 or AWS.")

    def _fs(self):
        import fsspec

        # the endpoint is passed even when it comes from the environment: fsspec caches filesystems by their
        # arguments, and one made for another endpoint would otherwise be handed back
        endpoint = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3")
        options = {"endpoint_url": endpoint} if endpoint and self.is_s3 else {}
        return fsspec.core.url_to_fs(self.url, **options)

    @property
    def is_s3(self) -> bool:
        return self.url.startswith(("s3://", "s3a://"))

    def path(self, key: str) -> str:
        return f"{self._fs()[1].rstrip('/')}/{key.lstrip('/')}"

    def uri(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key.lstrip('/')}"

    def _fresh(self, key: str):
        """The filesystem with no cached listing of `key` (s3fs would answer from a listing made earlier)."""
        fs, _ = self._fs()
        fs.invalidate_cache(self.path(key))
        return fs

    def exists(self, key: str) -> bool:
        return self._fresh(key).exists(self.path(key))

    def list(self, prefix: str) -> list[str]:
        """Keys of the files directly under `prefix`, sorted, as they are now (not as a cache remembers them)."""
        fs, root = self._fs()
        base = self.path(prefix)
        fs.invalidate_cache(base)  # s3fs caches listings: files landed by another process would stay unseen
        try:
            entries = fs.ls(base, detail=True)  # one listing call, with types: no request per file
        except FileNotFoundError:
            return []
        root = root.rstrip("/") + "/"
        names = (e["name"] for e in entries if e["type"] == "file")
        return sorted(p[len(root):] if p.startswith(root) else p for p in names)

    def read_bytes(self, key: str) -> bytes:
        fs = self._fresh(key)
        with fs.open(self.path(key), "rb") as f:
            return f.read()

    def write_bytes(self, key: str, data: bytes) -> str:
        """Readers never see half a file: on disk, written aside and moved into place; on S3 a PUT is atomic."""
        fs, _ = self._fs()
        final = self.path(key)
        if self.is_s3:  # the bucket must exist; a "folder" on S3 is only a key prefix
            fs.pipe_file(final, data)
            return self.uri(key)
        parent = final.rsplit("/", 1)[0]
        fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.{final.rsplit('/', 1)[1]}.partial"
        with fs.open(tmp, "wb") as f:
            f.write(data)
        fs.mv(tmp, final)
        return self.uri(key)

    def read_json(self, key: str) -> Any:
        return json.loads(self.read_bytes(key))

    def write_json(self, key: str, value: Any) -> str:
        return self.write_bytes(key, json.dumps(value, indent=1, sort_keys=True).encode())

    def write_parquet(self, key: str, frame) -> str:
        buf = io.BytesIO()
        frame.write_parquet(buf)
        return self.write_bytes(key, buf.getvalue())

    def read_parquet(self, key: str):
        import polars as pl

        return pl.read_parquet(io.BytesIO(self.read_bytes(key)))
