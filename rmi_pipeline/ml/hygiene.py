"""Eval hygiene shared by the eval suite and the training dataset: n-gram hashes and the mined split rule; and the
rule that keeps an answer that only repeats its asker's claim out of training.

Both sides apply the same rules, so training can exclude what the evals hold while seeing only hashes.
"""

from __future__ import annotations

import hashlib


def canonical_hash(canonical: str) -> str:
    """What the eval suite publishes of an item, and training compares: sha256 of its prompt's canonical form."""
    return hashlib.sha256(canonical.encode()).hexdigest()


def canonical_hashes(canonicals):
    """canonical_hash over a polars String Series (a null stays null), in Rust (polars-hash): 10M rows take a
    second, where hashlib row by row took five."""
    import polars_hash

    return canonicals.to_frame("c").select(polars_hash.col("c").chash.sha2_256()).to_series().rename(canonicals.name)


def ngram_hashes(text: str, n: int) -> set[str]:
    """Hashes of the whitespace-token n-grams of a text (none when it has fewer than n tokens)."""
    tokens = text.split()
    return {hashlib.sha256(" ".join(tokens[i:i + n]).encode()).hexdigest()[:16]
            for i in range(len(tokens) - n + 1)}


def is_mined_holdout(prompt_hash: str, share: float) -> bool:
    """Whether a corrected hard case belongs to the held-out mined slice: decided by its hash, so the
    same problem lands on the same side whenever and wherever it is seen."""
    return int(prompt_hash[:8], 16) / 0xFFFFFFFF < share


def mined_holdout(prompt_hash, share: float):
    """is_mined_holdout over a polars column of prompt hashes."""
    return prompt_hash.str.slice(0, 8).str.to_integer(base=16) / 0xFFFFFFFF < share


def echoes(prompt: str, answer: str) -> bool:
    """Whether an answer only repeats what its asker wrote: its words with a digit (or, with none, its words of four
    letters or more) are all in the prompt, and it has one. A user who liked such an answer liked hearing their own
    claim back: that is agreement, not evidence that it is right, and training on it teaches sycophancy."""
    said = set(_words(prompt))
    words = [w for w in _words(answer) if any(c.isdigit() for c in w)] or [
        w for w in _words(answer) if w.isalpha() and len(w) >= 4]
    return bool(words) and all(w in said for w in words)


def _words(text: str) -> list[str]:
    return [w for w in (w.strip(".,;:!?()[]\"'").lower() for w in text.split()) if w]
