"""The object store: one fsspec root (file:// by default, s3:// when a team outgrows one machine).

On S3, credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile,
an instance role), never from Dagster config, so they never show in the UI or in run logs. Only the endpoint
of an S3-compatible server (MinIO, a local S3) is configuration. A store that cannot be reached is one error,
StoreUnreachable, within a bounded time (a few seconds of connection attempts), never a page of botocore.
"""

from __future__ import annotations

import functools
import io
import json
import os
import uuid
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

S3_CONNECTION = {"connect_timeout": 5, "retries": {"max_attempts": 2, "mode": "standard"}}


class StoreUnreachable(ConnectionError):
    """The object store did not answer: `cannot reach s3://bucket (connection refused at ENDPOINT)`."""


def _reachable(method):
    """Connection failures of the store become one StoreUnreachable that names the store, not a traceback."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            from botocore.exceptions import ConnectionError as BotoConnectionError

            if not isinstance(exc, BotoConnectionError | ConnectionRefusedError) or isinstance(exc, StoreUnreachable):
                raise
            endpoint = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or "AWS"
            bucket = self.url.split("/")[2] if "://" in self.url else self.url
            raise StoreUnreachable(f"cannot reach {self.url.split('://')[0]}://{bucket} (connection refused at "
                                   f"{endpoint})") from None

    return call


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
        if self.is_s3:
            options |= {"config_kwargs": S3_CONNECTION}
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

    @_reachable
    def exists(self, key: str) -> bool:
        return self._fresh(key).exists(self.path(key))

    def reach(self) -> None:
        """One request to the store, so that a command says it cannot reach it at once, not after minutes of work
        (a gateway started, a model loaded)."""
        self.exists("")

    @_reachable
    def list(self, prefix: str) -> list[str]:
        """Keys of the plain files directly under `prefix`, sorted, as they are now (not as a cache remembers them)."""
        return self.listing(prefix)[0]

    @_reachable
    def listing(self, prefix: str) -> tuple[list[str], list[str]]:
        """(keys of the plain files, names of the other entries with what they are) directly under `prefix`: a
        link or a folder is never read as a batch, and the operator is told which were passed over."""
        fs, root = self._fs()
        base = self.path(prefix)
        fs.invalidate_cache(base)  # s3fs caches listings: files landed by another process would stay unseen
        try:
            entries = fs.ls(base, detail=True)  # one listing call, with types: no request per file
        except FileNotFoundError:
            return [], []
        root = root.rstrip("/") + "/"
        key = lambda e: e["name"][len(root):] if e["name"].startswith(root) else e["name"]  # noqa: E731
        files = sorted(key(e) for e in entries if e["type"] == "file" and not e.get("islink"))
        others = sorted(f"{key(e).rsplit('/', 1)[-1]} ({'a link' if e.get('islink') else e['type']})"
                        for e in entries if e["type"] != "file" or e.get("islink"))
        return files, others

    @_reachable
    def read_bytes(self, key: str) -> bytes:
        fs = self._fresh(key)
        with fs.open(self.path(key), "rb") as f:
            return f.read()

    @_reachable
    def write_bytes(self, key: str, data: bytes) -> str:
        return self._put(key, lambda fs, path: fs.pipe_file(path, data))

    @_reachable
    def write_file(self, key: str, local_path: str) -> str:
        """A local file into the store, streamed: a training dataset larger than memory never is one bytes."""
        return self._put(key, lambda fs, path: fs.put_file(local_path, path))

    def _put(self, key: str, write) -> str:
        """Readers never see half a file: on disk, written aside and moved into place; on S3 a PUT is atomic."""
        fs, _ = self._fs()
        final = self.path(key)
        if self.is_s3:  # the bucket must exist; a "folder" on S3 is only a key prefix
            write(fs, final)
            return self.uri(key)
        parent = final.rsplit("/", 1)[0]
        fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.{final.rsplit('/', 1)[1]}.{uuid.uuid4().hex[:12]}.partial"  # a writer's own: never shared
        write(fs, tmp)
        fs.mv(tmp, final)
        return self.uri(key)

    @_reachable
    def delete(self, key: str) -> None:
        """Remove a file; one that is not there is no error."""
        fs = self._fresh(key)
        if fs.exists(self.path(key)):
            fs.rm(self.path(key))

    def read_json(self, key: str) -> Any:
        return json.loads(self.read_bytes(key))

    def write_json(self, key: str, value: Any) -> str:
        """Keys sorted, no indentation: Python's encoder in C (an indented eval set took 5x as long; `jq .` shows
        one indented)."""
        return self.write_bytes(key, json.dumps(value, sort_keys=True).encode())

    def write_parquet(self, key: str, frame) -> str:
        buf = io.BytesIO()
        frame.write_parquet(buf)
        return self.write_bytes(key, buf.getvalue())

    def read_parquet(self, key: str):
        import polars as pl

        return pl.read_parquet(io.BytesIO(self.read_bytes(key)))
