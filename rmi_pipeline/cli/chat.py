"""`rmi chat`: the Slack app on 127.0.0.1:3100/slack/events (slack-bolt under FastAPI and uvicorn)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..settings import Settings
from .extras import require
from .home import prepare_home, run_server, server_logging


def chat(
    host: Annotated[str, typer.Option(help="Address to listen on (a tunnel or an ingress brings Slack's requests "
                                           "here).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 3100,
) -> int:
    """Steer the loop from Slack: the /rmi command (status | promote | rollback | cycle | pause | resume | canary
    abort) and alert buttons, at /slack/events. Settings: RMI_SLACK_SIGNING_SECRET, RMI_SLACK_BOT_TOKEN,
    RMI_SLACK_ALLOWED_USERS, RMI_UI_URL (docs/how-to/slack.md)."""
    require("chat", "rmi chat")
    settings = Settings()
    prepare_home(settings)
    from ..chat.app import build_asgi

    server_logging()
    users = len(settings.chat.allowed_users)
    return run_server(build_asgi(settings), host, port, f"rmi chat: Slack requests on http://{host}:{port}"
                      f"/slack/events (signed requests only; {users} Slack users may act; Dagster at "
                      f"{settings.ui.url}; Ctrl-C stops it)")
