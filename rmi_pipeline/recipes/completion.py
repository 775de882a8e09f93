"""How a client asks for an answer to be decoded (Decoding), and what it gets back (Completion): the options of
OpenAI's API that change an answer, in the recipe contract's terms, and the rules every recipe shares.

A recipe decodes with them in `Recipe.complete`; `answer` and `sample` stay what the loop calls. Tokens are the
recipe's own (characters for the arithmetic model, the tokenizer's for a Hugging Face one): `max_tokens` and the
token counts of `usage` are in them.
"""

from __future__ import annotations

from dataclasses import dataclass

STOP, LENGTH = "stop", "length"  # OpenAI's finish reasons: the answer ended (or met a stop text); max_tokens cut it


@dataclass(frozen=True)
class Decoding:
    """How to decode: greedy with the recipe's own length limit unless a field says otherwise."""

    max_tokens: int | None = None  # at most this many new tokens; None: the recipe's own limit
    temperature: float = 0.0  # 0: greedy; above 0: sampled at that temperature
    top_p: float = 1.0  # sampled from the fewest most likely tokens whose probabilities reach top_p
    stop: tuple[str, ...] = ()  # the answer ends before the first of these texts, which it does not contain
    seed: int = 0  # of the sampling; a greedy answer needs none

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


@dataclass(frozen=True)
class Completion:
    """One answer: its text, the model's tokens decoded for it, why it ended (STOP or LENGTH), and whether the
    client's max_tokens or stop text ended it before the model did (`cut`: not the model's whole answer, so a
    thumb on it says nothing of the model's choice)."""

    text: str
    tokens: int
    finish_reason: str
    cut: bool = False


def cut(pieces: list[str], decoding: Decoding, ended: bool = True) -> Completion:
    """The answer whose tokens are `pieces`, cut at `max_tokens` and before the first stop text. `ended`: the model
    ended it itself (else its own length limit cut it: LENGTH). A recipe that decodes a whole answer first and cuts
    it after (the default `Recipe.complete`) ends here."""
    finish, short = STOP if ended else LENGTH, False
    if decoding.max_tokens is not None and len(pieces) > decoding.max_tokens:
        pieces, finish, short = pieces[:decoding.max_tokens], LENGTH, True
    text, at = stopped("".join(pieces), decoding.stop)
    if at is None:
        return Completion(text, len(pieces), finish, short)
    offset = 0  # the tokens decoded: up to the one the stop text begins in
    for i, piece in enumerate(pieces):
        if offset + len(piece) > at:
            return Completion(text, i + 1, STOP, True)
        offset += len(piece)
    return Completion(text, len(pieces), STOP, True)


def stopped(text: str, stop: tuple[str, ...]) -> tuple[str, int | None]:
    """`text` before the earliest of the stop texts in it, and where that was (None: none is in it)."""
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text, None) if not found else (text[:min(found)], min(found))


def plain_prompt(messages: list[dict]) -> str:
    """The plain rendering of a chat, for a model that answers one question at a time: the last message, which must
    be the user's, is the prompt; earlier messages (a system message, earlier turns) are not shown to the model.
    ValueError where no such message ends the chat: there is no question to answer."""
    if not messages or messages[-1].get("role") != "user":
        raise ValueError("the last message must be the user's (role 'user'): it is the question the model answers")
    return messages[-1]["content"]
