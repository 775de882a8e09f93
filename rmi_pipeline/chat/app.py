"""The Slack app (slack-bolt, HTTP mode) at /slack/events: the `/rmi` command and the buttons on alerts, wired.

Bolt checks every request's signature with RMI_SLACK_SIGNING_SECRET and refuses one whose timestamp is more than
5 minutes off (a replay). What each request does is in listeners.py.
"""

from __future__ import annotations

import logging
import re
from functools import partial

from ..resources.notifier import BUTTONS
from .commands import CommandRunner
from .listeners import Listeners

log = logging.getLogger("rmi.chat")


def build_app(settings):
    from slack_bolt import App

    chat = settings.chat
    if not chat.signing_secret:
        raise ValueError("RMI_SLACK_SIGNING_SECRET is not set: every request must be verified with the Slack app's "
                         "signing secret (docs/how-to/slack.md)")
    bot_token = chat.bot_token.get_secret_value() if chat.bot_token else None
    app = App(signing_secret=chat.signing_secret.get_secret_value(), authorize=partial(authorize, bot_token=bot_token),
              logger=log, ssl_check_enabled=False, url_verification_enabled=True)
    runner = CommandRunner(settings)
    runner.warm()
    listeners = Listeners(settings, runner)
    app.command("/rmi")(listeners.command)
    app.action("rmi_open_run")(listeners.link)
    app.action(re.compile(f"^({'|'.join(BUTTONS)})$"))(listeners.button)
    return app


def authorize(enterprise_id, team_id, user_id, *, bot_token: str | None):
    """One workspace, one bot token: no OAuth, no network call (Bolt passes the arguments it finds by name)."""
    from slack_bolt.authorization import AuthorizeResult

    return AuthorizeResult(enterprise_id=enterprise_id, team_id=team_id, bot_token=bot_token or None, user_id=user_id)


def build_asgi(settings):
    """The app under FastAPI: POST /slack/events for Slack, GET /healthz for a probe."""
    from fastapi import FastAPI
    from slack_bolt.adapter.starlette import SlackRequestHandler

    from . import routes

    api = FastAPI(title="rmi chat", docs_url=None, redoc_url=None, openapi_url=None)
    api.state.slack = SlackRequestHandler(build_app(settings))
    api.include_router(routes.router)
    return api
