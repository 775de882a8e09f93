"""Block Kit pieces the replies and alerts are made of (https://api.slack.com/block-kit), and a reply itself."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_TEXT = 2900  # a section's text may hold 3,000 characters


@dataclass
class Reply:
    text: str  # the notification's text, and what a client without blocks shows
    blocks: list[dict] = field(default_factory=list)


def escape(text: str) -> str:
    """Slack's three control characters, so untrusted text cannot mention @channel or forge a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def section(markdown: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": markdown[:MAX_TEXT]}}


def context(markdown: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": markdown[:MAX_TEXT]}]}


def table(header: list[str], rows: list[list[str]]) -> dict:
    """A fixed-width table in a code block (Block Kit has no table that every client shows)."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in [header, *rows]]
    return section("```" + "\n".join(lines)[:MAX_TEXT - 6] + "```")


def run_link(url: str, run_id: str) -> dict:
    return context(f"<{url}|Dagster run {run_id[:8]}>")
