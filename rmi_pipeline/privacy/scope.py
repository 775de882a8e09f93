"""Which feedback a deletion removes: every event of one user, or every event older than a moment (retention).

One Scope answers the question in each form the stores keep events in: SQL over the warehouse, a polars filter over
Parquet, a parsed JSON record, and a raw line that is not JSON at all (a quarantined row).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class Scope:
    user_id: str | None = None  # every event of this user
    before: datetime | None = None  # every event whose ts is earlier (UTC)

    def __post_init__(self):
        if (self.user_id is None) == (self.before is None):
            raise ValueError("a deletion names a user or a time, not both")
        if self.user_id is not None and not self.user_id.strip():
            raise ValueError("a user id must not be empty")
        if self.before is not None:  # compared as UTC everywhere, ISO text included
            if self.before.tzinfo is None:
                raise ValueError("a retention cut-off must carry its time zone")
            object.__setattr__(self, "before", self.before.astimezone(UTC))

    @property
    def kind(self) -> str:
        return "user" if self.user_id is not None else "retention"

    def sql(self) -> tuple[str, list]:
        """A condition on feedback_events and its parameters."""
        return ("user_id = ?", [self.user_id]) if self.user_id is not None else ("ts < ?", [self.before])

    def rows(self, frame):
        """The rows of a polars frame of events (columns user_id, ts) in scope, as a boolean Series; a row it
        cannot date (retention) is None."""
        import polars as pl

        if self.user_id is not None:
            if "user_id" not in frame.columns:
                return pl.Series([False] * frame.height, dtype=pl.Boolean)
            return frame["user_id"].cast(pl.String).eq(self.user_id).fill_null(False)
        if "ts" not in frame.columns:
            return pl.Series([None] * frame.height, dtype=pl.Boolean)
        ts = frame["ts"]
        if ts.dtype == pl.String:
            ts = ts.str.to_datetime(time_zone="UTC", strict=False)
        elif isinstance(ts.dtype, pl.Datetime):
            ts = ts.dt.replace_time_zone("UTC") if ts.dtype.time_zone is None else ts.dt.convert_time_zone("UTC")
        else:
            return pl.Series([None] * frame.height, dtype=pl.Boolean)
        return ts < self.before

    def record(self, record) -> bool | None:
        """A parsed JSON value as a client sent it (or a quarantined event as JSON): in scope, not, or None when
        it says nothing about it (retention: no readable ts)."""
        if not isinstance(record, dict):
            return None if self.before is not None else False
        if self.user_id is not None:
            return record.get("user_id") == self.user_id
        ts = _timestamp(record.get("ts"))
        return None if ts is None else ts < self.before

    def raw(self, text: str) -> bool | None:
        """A line no parser could read (cut short, malformed): a user's when it holds their id as a JSON string;
        undated for retention."""
        try:
            return self.record(json.loads(text))
        except (ValueError, RecursionError):
            pass
        if self.user_id is not None:
            return json.dumps(self.user_id) in text or json.dumps(self.user_id, ensure_ascii=False) in text
        return None

    def describe(self) -> str:
        """In words, without the user's id (logs and the audit)."""
        return "one user's feedback" if self.user_id is not None else \
            f"feedback older than {self.before:%Y-%m-%d %H:%M} UTC"

    def to_json(self) -> dict:
        return {"user_id": self.user_id, "before": self.before.isoformat() if self.before else None}

    @classmethod
    def from_json(cls, data: dict) -> Scope:
        before = data.get("before")
        return cls(user_id=data.get("user_id"), before=datetime.fromisoformat(before) if before else None)


def _timestamp(value) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts
