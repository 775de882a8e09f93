"""Alerts for a person: Slack-compatible webhook JSON, sent once per event, each with a link to its run.

With no webhook URL set, alerts go to the log only. An alert the webhook does not take (down, refusing, an HTTP
error) waits in an outbox and is sent again on the next alert or by run_failure_alert's tick: the step that raised
it has done its work, so a failed delivery never fails it. State (sent keys, the outbox) is a small JSON file under
RMI_HOME, shared by sensors, runs and restarts under a file lock. The webhook URL is a secret: no log or error
names it.
"""

import json
import logging
import urllib.error
import urllib.request
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from dagster import ConfigurableResource

log = logging.getLogger("rmi.alerts")
ATTEMPTS = 3  # per delivery, a second apart and then two (tenacity); after that the alert waits in the outbox
# buttons an alert may carry, by Slack action id (`rmi chat` acts on a click through the audited paths)
BUTTONS = {"rmi_rollback": "Roll back", "rmi_promote": "Promote anyway", "rmi_cycle": "Start a targeted cycle",
           "rmi_ack": "Acknowledge", "rmi_approve": "Approve", "rmi_reject": "Reject"}
MOVES_CHAMPION = ("rmi_rollback", "rmi_promote", "rmi_approve")


class Notifier(ConfigurableResource):
    webhook_url: str | None = None
    ui_url: str = "http://127.0.0.1:3000"
    state_path: str
    timeout_seconds: float = 10.0

    def run_link(self, run_id: str) -> str:
        return f"{self.ui_url.rstrip('/')}/runs/{run_id}"

    def notify(self, kind: str, text: str, key: str, run_id: str | None = None,
               actions: dict[str, dict] | None = None) -> bool:
        """Raise one alert (`kind`: failure, regression, budget, promotion); False if `key` was raised before.
        `actions`: buttons (BUTTONS' action ids, each with the values a click carries back), sent as Block Kit.
        Never raises for a webhook that does not answer: the alert waits in the outbox."""
        with self._state() as state:
            if key in state["sent"] or key in state["outbox"]:
                return False
            link = f" <{self.run_link(run_id)}|run {run_id[:8]}>" if run_id else ""
            message = f"[rmi {kind}] {text}{link}"  # Slack's markup: the webhook's text
            log.warning(f"[rmi {kind}] {text}" + (f" (run {run_id[:8]})" if run_id else ""))  # a plain line
            state["outbox"][key] = {"message": message, "raised_at": _now(), "tries": 0,
                                    "blocks": alert_blocks(message, key, actions or {},
                                                           self.run_link(run_id) if run_id else None)}
            self._deliver(state)
        return True

    def flush(self) -> int:
        """Send what waits in the outbox; returns how many alerts still wait."""
        with self._state() as state:
            self._deliver(state)
            return len(state["outbox"])

    def undelivered(self) -> dict[str, dict]:
        """The alerts the webhook has not taken yet, by key, with the last error."""
        with self._state() as state:
            return dict(state["outbox"])

    def _deliver(self, state: dict) -> None:
        for key, alert in list(state["outbox"].items()):
            if self.webhook_url:
                try:
                    self._post({"text": alert["message"], **({"blocks": alert["blocks"]} if "blocks" in alert else {})})
                except (urllib.error.URLError, OSError) as exc:
                    alert["tries"] += 1
                    alert["last_error"] = _reason(exc)
                    log.warning(f"alert {key} not delivered ({alert['last_error']}); it waits in the outbox")
                    continue
            state["sent"][key] = _now()
            del state["outbox"][key]

    def _post(self, body: dict) -> None:
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

        request = urllib.request.Request(self.webhook_url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        for attempt in Retrying(stop=stop_after_attempt(ATTEMPTS), wait=wait_exponential(multiplier=1, max=2),
                                retry=retry_if_exception_type(OSError), reraise=True):
            with attempt:
                urllib.request.urlopen(request, timeout=self.timeout_seconds).close()

    @contextmanager
    def _state(self):
        from filelock import FileLock

        path = Path(self.state_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock"):
            state = json.loads(path.read_text()) if path.exists() else {"sent": {}, "outbox": {}}
            yield state
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(state, indent=1))
            partial.replace(path)


def alert_blocks(message: str, key: str, actions: dict[str, dict], run_url: str | None) -> list[dict]:
    """The alert as Block Kit: its text, then its buttons (the run in the UI; what a person may do through
    `rmi chat`, each click carrying the alert's key and its values)."""
    buttons = ([{"type": "button", "text": {"type": "plain_text", "text": "Open the run"}, "url": run_url,
                 "action_id": "rmi_open_run"}] if run_url else [])
    for action_id, values in actions.items():
        label = BUTTONS[action_id]
        button = {"type": "button", "text": {"type": "plain_text", "text": label}, "action_id": action_id,
                  "value": json.dumps({"alert": key, **values})[:2000]}
        if action_id in MOVES_CHAMPION:
            button["confirm"] = {"title": {"type": "plain_text", "text": f"{label}?"},
                                 "text": {"type": "mrkdwn", "text": "This moves the champion (audited)."},
                                 "confirm": {"type": "plain_text", "text": label},
                                 "deny": {"type": "plain_text", "text": "Cancel"}}
        buttons.append(button)
    section = {"type": "section", "text": {"type": "mrkdwn", "text": message[:2900]}}
    return [section, {"type": "actions", "block_id": "alert", "elements": buttons}] if buttons else [section]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _reason(exc: Exception) -> str:
    """Why a delivery failed, without the URL: HTTP 500, connection refused, timed out."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    reason = getattr(exc, "reason", exc)
    return getattr(reason, "strerror", None) or type(reason).__name__
