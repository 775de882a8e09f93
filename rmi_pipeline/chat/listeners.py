"""What the Slack app does with each request: the `/rmi` command and the buttons on alerts.

A command is acknowledged at once, inside Slack's 3 seconds (a refusal is that acknowledgement); the work is done
after it and the result posted to the request's response_url. Only the user ids in RMI_SLACK_ALLOWED_USERS may
act; anyone may ask for status. Every request acted on or refused is audited.
"""

from __future__ import annotations

import json
import logging

from . import audit, blocks
from .commands import Command, CommandRunner, Refused, from_button, parse

log = logging.getLogger("rmi.chat")


class Listeners:
    """Bolt's listeners for one app, as methods: Bolt passes each the arguments it names (ack, command, ...)."""

    def __init__(self, settings, runner: CommandRunner):
        self.settings, self.runner = settings, runner

    def command(self, ack, command, respond) -> None:
        user, text = command["user_id"], command.get("text", "")
        who = _who(user, command.get("user_name"))
        try:
            parsed = parse(text)
        except Refused as exc:
            audit.record(self.settings, user=user, text=text, outcome="refused", detail=str(exc))
            ack(text=f":x: {blocks.escape(str(exc))}", response_type="ephemeral")
            return
        if parsed.acts and not self._allowed(user, text, "slash command"):
            ack(text=f":no_entry: {who} may not `{parsed.name}`: only the users in RMI_SLACK_ALLOWED_USERS may act "
                     "(the attempt is audited).", response_type="ephemeral")
            return
        ack(text=f"Working on `/rmi {blocks.escape(text.strip() or 'status')}`...", response_type="ephemeral")
        reply, error = self._act(parsed, who, user, text, "slash command")
        if error:
            respond(text=error, response_type="ephemeral")
        else:
            respond(text=reply.text, blocks=reply.blocks, response_type="in_channel" if parsed.acts else "ephemeral")

    def link(self, ack) -> None:
        """A link button: Slack opens the run and tells the app, which has nothing to do."""
        ack()

    def button(self, ack, body, action, respond) -> None:
        ack()
        user = body["user"]["id"]
        who = _who(user, body["user"].get("username") or body["user"].get("name"))
        kind = action["action_id"].removeprefix("rmi_")
        value = json.loads(action.get("value") or "{}")
        alert = str(value.get("alert", "an alert"))[:200]
        label = f"button {kind} on {alert}"
        if not self._allowed(user, label, "button"):
            respond(text=f":no_entry: {who} may not act on alerts: only the users in RMI_SLACK_ALLOWED_USERS may "
                         "(the attempt is audited).", response_type="ephemeral", replace_original=False)
            return
        if kind == "ack":
            audit.record(self.settings, user=user, text=label, outcome="done", detail="acknowledged", source="button")
            done = f":eyes: Acknowledged by {who}"
        else:
            reply, error = self._act(from_button(kind, value, alert), who, user, label, "button")
            if error:
                respond(text=error, response_type="ephemeral", replace_original=False)
                return
            done = f":white_check_mark: {reply.text}"
        message = body.get("message", {})
        kept = [b for b in message.get("blocks", []) if b.get("type") != "actions"]  # the buttons, once used
        respond(text=f"{message.get('text', '')}\n{done}", blocks=[*kept, blocks.context(done)],
                replace_original=True)

    def _allowed(self, user: str, text: str, source: str) -> bool:
        if user in self.settings.chat.allowed_users:
            return True
        audit.record(self.settings, user=user, text=text, outcome="refused", source=source,
                     detail="not in RMI_SLACK_ALLOWED_USERS")
        log.warning("refused %s from Slack user %s: not in RMI_SLACK_ALLOWED_USERS", source, user)
        return False

    def _act(self, command: Command, who: str, user: str, text: str, source: str):
        """(reply, None) once the command is carried out, or (None, error) after a refusal or a failure; audited."""
        try:
            reply = self.runner.run(command, who)
        except Refused as exc:
            audit.record(self.settings, user=user, text=text, outcome="refused", detail=str(exc), source=source)
            return None, f":x: {blocks.escape(str(exc))}"
        except (ConnectionError, RuntimeError) as exc:
            audit.record(self.settings, user=user, text=text, outcome="failed", detail=str(exc), source=source)
            return None, f":warning: {blocks.escape(str(exc))}"
        if command.acts:
            audit.record(self.settings, user=user, text=text, outcome="done", detail=reply.text, source=source)
        return reply, None


def _who(user: str, name: str | None) -> str:
    return f"slack:{user}" + (f" ({name[:40]})" if name else "")
