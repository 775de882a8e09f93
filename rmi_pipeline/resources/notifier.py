"""Alerts for a person: Slack-compatible webhook JSON, sent once per event, each with a link to its run.

With no webhook URL set, alerts go to the log only. Dedupe state is a small JSON file under RMI_HOME so
that sensors, runs and restarts share it.
"""

import json
import logging
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from dagster import ConfigurableResource

log = logging.getLogger("rmi.alerts")


class Notifier(ConfigurableResource):
    webhook_url: str | None = None
    ui_url: str = "http://127.0.0.1:3000"
    state_path: str

    def run_link(self, run_id: str) -> str:
        return f"{self.ui_url.rstrip('/')}/runs/{run_id}"

    def notify(self, kind: str, text: str, key: str, run_id: str | None = None) -> bool:
        """Send one alert (`kind`: failure, regression, budget, promotion); False if `key` was already sent."""
        state = Path(self.state_path)
        sent = json.loads(state.read_text()) if state.exists() else {}
        if key in sent:
            return False
        link = f" <{self.run_link(run_id)}|run {run_id[:8]}>" if run_id else ""
        message = f"[rmi {kind}] {text}{link}"
        log.warning(message)
        if self.webhook_url:
            request = urllib.request.Request(self.webhook_url, data=json.dumps({"text": message}).encode(),
                                             headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=10).close()
        sent[key] = datetime.now(UTC).isoformat()
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps(sent, indent=1))
        return True
