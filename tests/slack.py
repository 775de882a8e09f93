"""Requests as Slack sends them to an app: form-encoded, signed with the app's signing secret (v0 HMAC-SHA256 of
'v0:timestamp:body'), against a server on 127.0.0.1."""

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

import httpx


def signed(secret: str, body: str, timestamp: int | None = None) -> dict:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = "v0=" + hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature,
            "Content-Type": "application/x-www-form-urlencoded"}


def slash(url: str, secret: str, text: str, user: str, response_url: str, timestamp: int | None = None,
          sign_with: str | None = None) -> httpx.Response:
    """`/rmi text` typed by `user`; Slack then reads the reply's acknowledgement from the response."""
    body = urlencode({"token": "legacy-unused", "team_id": "T1", "team_domain": "team", "channel_id": "C1",
                      "user_id": user, "user_name": f"name-{user}", "command": "/rmi", "text": text,
                      "response_url": response_url, "trigger_id": "1.2.3", "api_app_id": "A1"})
    return httpx.post(f"{url}/slack/events", content=body, headers=signed(sign_with or secret, body, timestamp),
                      timeout=30)


def click(url: str, secret: str, user: str, action_id: str, value: dict, message: dict,
          response_url: str) -> httpx.Response:
    """A button of `message` clicked by `user`."""
    payload = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": user, "username": f"name-{user}"},
               "api_app_id": "A1", "container": {"type": "message"}, "trigger_id": "1.2.3",
               "channel": {"id": "C1"}, "message": message, "response_url": response_url,
               "actions": [{"type": "button", "action_id": action_id, "block_id": "alert",
                            "value": json.dumps(value), "action_ts": str(time.time())}]}
    body = urlencode({"payload": json.dumps(payload)})
    return httpx.post(f"{url}/slack/events", content=body, headers=signed(secret, body), timeout=30)
