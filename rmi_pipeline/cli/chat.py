"""`rmi chat`: the Slack app on 127.0.0.1:3100/slack/events (slack-bolt under FastAPI and uvicorn)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..settings import Settings
from .home import prepare_home, say, server_logging


def chat(
    host: Annotated[str, typer.Option(help="Address to listen on (a tunnel or an ingress brings Slack's requests "
                                           "here).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 3100,
) -> int:
    """Steer the loop from Slack: the /rmi command (status | promote | rollback | cycle | pause | resume | canary
    abort) and alert buttons, at /slack/events. Settings: RMI_SLACK_SIGNING_SECRET, RMI_SLACK_BOT_TOKEN,
    RMI_SLACK_ALLOWED_USERS, RMI_UI_URL (README: Steer the loop from Slack)."""
    settings = Settings()
    prepare_home(settings)
    import uvicorn

    from ..chat.app import build_asgi

    server_logging()
    app = build_asgi(settings)
    users = len(settings.chat.allowed_users)
    say(f"rmi chat: Slack requests on http://{host}:{port}/slack/events (signed requests only; "
        f"{users} Slack users may act; Dagster at {settings.ui_url}; Ctrl-C stops it)")
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False,
                timeout_graceful_shutdown=10)
    return 0
