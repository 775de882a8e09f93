"""`rmi chat`: the Slack app on 127.0.0.1:3100/slack/events (slack-bolt under FastAPI and uvicorn)."""

from __future__ import annotations

from ..settings import Settings
from .home import prepare_home, say, server_logging


def cmd_chat(args) -> int:
    settings = Settings()
    prepare_home(settings)
    import uvicorn

    from ..chat.app import build_asgi

    server_logging()
    app = build_asgi(settings)
    users = len(settings.chat.allowed_users)
    say(f"rmi chat: Slack requests on http://{args.host}:{args.port}/slack/events (signed requests only; "
        f"{users} Slack users may act; Dagster at {settings.ui_url}; Ctrl-C stops it)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", access_log=False,
                timeout_graceful_shutdown=10)
    return 0


def add_chat_command(sub) -> None:
    chat = sub.add_parser("chat", help="steer the loop from Slack: the /rmi command and alert buttons",
                          description="The Slack app (HTTP mode) at /slack/events: /rmi status | promote | rollback "
                          "| cycle | pause | resume | canary abort. Settings: RMI_SLACK_SIGNING_SECRET, "
                          "RMI_SLACK_BOT_TOKEN, RMI_SLACK_ALLOWED_USERS, RMI_UI_URL (README: Steer the loop from "
                          "Slack).")
    chat.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s; a tunnel or "
                      "an ingress brings Slack's requests here)")
    chat.add_argument("--port", type=int, default=3100, help="port (default %(default)s)")
    chat.set_defaults(fn=cmd_chat)
