"""The Slack app (slack-bolt, HTTP mode) at /slack/events: the `/rmi` command and the buttons on alerts.

Bolt checks every request's signature with RMI_SLACK_SIGNING_SECRET and refuses one whose timestamp is more than
5 minutes off (a replay). A command is acknowledged at once, inside Slack's 3 seconds (a refusal is that
acknowledgement); the work is done after it and the result posted to the request's response_url. Only the user
ids in RMI_SLACK_ALLOWED_USERS may act; anyone may ask for status. Every request acted on or refused is audited.
"""


import json
import logging
import re

from ..resources.notifier import BUTTONS
from . import audit, blocks
from .commands import Command, Refused, Steering, parse

log = logging.getLogger("rmi.chat")


def build_app(settings):
    from slack_bolt import App
    from slack_bolt.authorization import AuthorizeResult

    chat = settings.chat
    if not chat.signing_secret:
        raise ValueError("RMI_SLACK_SIGNING_SECRET is not set: every request must be verified with the Slack app's "
                         "signing secret (README: Steer the loop from Slack)")

    def authorize(enterprise_id, team_id, user_id):  # one workspace, one bot token: no OAuth, no network call
        return AuthorizeResult(enterprise_id=enterprise_id, team_id=team_id, bot_token=chat.bot_token or None,
                               user_id=user_id)

    app = App(signing_secret=chat.signing_secret, authorize=authorize, logger=log, ssl_check_enabled=False,
              url_verification_enabled=True)
    steering = Steering(settings)
    steering.warm()

    def allowed(user: str, text: str, source: str) -> bool:
        if user in chat.allowed_users:
            return True
        audit.record(settings, user=user, text=text, outcome="refused", source=source,
                     detail="not in RMI_SLACK_ALLOWED_USERS")
        log.warning("refused %s from Slack user %s: not in RMI_SLACK_ALLOWED_USERS", source, user)
        return False

    def act(command: Command, who: str, user: str, text: str, source: str):
        """Carry a command out; returns the reply, or None after a refusal or a failure (audited either way)."""
        try:
            reply = steering.run(command, who)
        except Refused as exc:
            audit.record(settings, user=user, text=text, outcome="refused", detail=str(exc), source=source)
            return None, f":x: {blocks.escape(str(exc))}"
        except (ConnectionError, RuntimeError) as exc:
            audit.record(settings, user=user, text=text, outcome="failed", detail=str(exc), source=source)
            return None, f":warning: {blocks.escape(str(exc))}"
        if command.acts:
            audit.record(settings, user=user, text=text, outcome="done", detail=reply.text, source=source)
        return reply, None

    @app.command("/rmi")
    def on_command(ack, command, respond):
        user, text = command["user_id"], command.get("text", "")
        who = _who(user, command.get("user_name"))
        try:
            parsed = parse(text)
        except Refused as exc:
            audit.record(settings, user=user, text=text, outcome="refused", detail=str(exc))
            ack(text=f":x: {blocks.escape(str(exc))}", response_type="ephemeral")
            return
        if parsed.acts and not allowed(user, text, "slash command"):
            ack(text=f":no_entry: {who} may not `{parsed.name}`: only the users in RMI_SLACK_ALLOWED_USERS may act "
                     "(the attempt is audited).", response_type="ephemeral")
            return
        ack(text=f"Working on `/rmi {blocks.escape(text.strip() or 'status')}`...", response_type="ephemeral")
        reply, error = act(parsed, who, user, text, "slash command")
        if error:
            respond(text=error, response_type="ephemeral")
        else:
            respond(text=reply.text, blocks=reply.blocks,
                    response_type="in_channel" if parsed.acts else "ephemeral")

    @app.action("rmi_open_run")  # a link button: Slack opens the run and tells the app, which has nothing to do
    def on_link(ack):
        ack()

    @app.action(re.compile(f"^({'|'.join(BUTTONS)})$"))
    def on_button(ack, body, action, respond):
        ack()
        user = body["user"]["id"]
        who = _who(user, body["user"].get("username") or body["user"].get("name"))
        kind = action["action_id"].removeprefix("rmi_")
        value = json.loads(action.get("value") or "{}")
        alert = str(value.get("alert", "an alert"))[:200]
        label = f"button {kind} on {alert}"
        if not allowed(user, label, "button"):
            respond(text=f":no_entry: {who} may not act on alerts: only the users in RMI_SLACK_ALLOWED_USERS may "
                         "(the attempt is audited).", response_type="ephemeral", replace_original=False)
            return
        if kind == "ack":
            audit.record(settings, user=user, text=label, outcome="done", detail="acknowledged", source="button")
            done = f":eyes: Acknowledged by {who}"
        else:
            command = {"rollback": Command("rollback", reason=f"Roll back, from {alert}"),
                       "promote": Command("promote", version=str(value.get("version", "")),
                                          reason=f"Promote anyway, from {alert}"),
                       "cycle": Command("cycle", slices=tuple(value.get("slices", [])))}[kind]
            reply, error = act(command, who, user, label, "button")
            if error:
                respond(text=error, response_type="ephemeral", replace_original=False)
                return
            done = f":white_check_mark: {reply.text}"
        message = body.get("message", {})
        kept = [b for b in message.get("blocks", []) if b.get("type") != "actions"]
        respond(text=f"{message.get('text', '')}\n{done}", blocks=[*kept, blocks.context(done)],
                replace_original=True)

    return app


def build_asgi(settings):
    """The app under FastAPI: POST /slack/events for Slack, GET /healthz for a probe."""
    from fastapi import FastAPI, Request
    from slack_bolt.adapter.starlette import SlackRequestHandler

    handler = SlackRequestHandler(build_app(settings))
    api = FastAPI(title="rmi chat", docs_url=None, redoc_url=None, openapi_url=None)

    @api.post("/slack/events")
    async def events(request: Request):
        return await handler.handle(request)

    @api.get("/healthz")
    def healthz():
        return {"status": "ok"}

    return api


def _who(user: str, name: str | None) -> str:
    return f"slack:{user}" + (f" ({name[:40]})" if name else "")
