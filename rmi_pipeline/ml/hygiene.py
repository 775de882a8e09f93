"""Eval hygiene shared by the eval suite and the training dataset: n-gram hashes and the mined split rule.

Both sides apply the same rules, so training can exclude what the evals hold while seeing only hashes.
"""

from __future__ import annotations

import hashlib


def ngram_hashes(text: str, n: int) -> set[str]:
    """Hashes of the whitespace-token n-grams of a text (none when it has fewer than n tokens)."""
    tokens = text.split()
    return {hashlib.sha256(" ".join(tokens[i:i + n]).encode()).hexdigest()[:16]
            for i in range(len(tokens) - n + 1)}


def is_mined_holdout(prompt_hash: str, share: float) -> bool:
    """Whether a corrected hard case belongs to the held-out mined slice: decided by its hash, so the
    same problem lands on the same side whenever and wherever it is seen."""
    return int(prompt_hash[:8], 16) / 0xFFFFFFFF < share
