"""The object store: one fsspec root (file:// by default, s3:// when a team outgrows one machine)."""

from __future__ import annotations

import io
import json
from typing import Any

from dagster import ConfigurableResource


class ObjectStore(ConfigurableResource):
    """Paths are relative keys like 'feedback/incoming/b1.jsonl' under `url`."""

    url: str

    def _fs(self):
        import fsspec

        return fsspec.core.url_to_fs(self.url)

    def path(self, key: str) -> str:
        return f"{self._fs()[1].rstrip('/')}/{key.lstrip('/')}"

    def uri(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key.lstrip('/')}"

    def exists(self, key: str) -> bool:
        fs, _ = self._fs()
        return fs.exists(self.path(key))

    def list(self, prefix: str) -> list[str]:
        """Keys of the files directly under `prefix`, sorted."""
        fs, root = self._fs()
        base = self.path(prefix)
        if not fs.exists(base):
            return []
        root = root.rstrip("/") + "/"
        return sorted(p[len(root):] if p.startswith(root) else p
                      for p in fs.ls(base, detail=False) if fs.isfile(p))

    def read_bytes(self, key: str) -> bytes:
        fs, _ = self._fs()
        with fs.open(self.path(key), "rb") as f:
            return f.read()

    def write_bytes(self, key: str, data: bytes) -> str:
        """Write to a temporary key and move it into place, so readers never see half a file."""
        fs, _ = self._fs()
        final = self.path(key)
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
