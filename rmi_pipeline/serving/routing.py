"""Which arm answers a user: the champion, or the canary for a share of users while one is on trial.

A user's arm is a hash of their id salted with the canary's version: the same user meets the same model all
through one canary (their thumbs-down then measure that model, not a mix), and each new canary draws a new share
of users, so no group of users carries every trial.
"""

from __future__ import annotations

import hashlib


def in_canary(user_id: str, canary_version: str, share: float) -> bool:
    """Whether `user_id` is among the `share` of users the canary `canary_version` answers."""
    digest = hashlib.sha256(f"{canary_version}\0{user_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < share * 2**64
