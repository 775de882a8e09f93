"""Character tokens and the model's view of a problem: digits least significant first, zero-padded to its width.

'123+45=' -> '321' '+' '540' '=' then the answer '8610'. Reversed digits let the model produce the carry in the
order it is computed; both operands padded to the longer one's width put digits of one place value at the same
place of their segment, and the answer has one digit more. Rows of a batch are right-padded with PAD.
"""

from __future__ import annotations

import numpy as np
import torch

VOCAB = "0123456789+-=."
STOI = {c: i for i, c in enumerate(VOCAB)}
PAD = "."  # after a row's answer, where a batch's rows differ in width: never a loss target
SEPARATORS = [STOI["+"], STOI["-"]]
ANSWER_TOKEN = STOI["="]
_NOT_IN_VOCAB = 255
_IDS = np.full(256, _NOT_IN_VOCAB, dtype=np.uint8)  # byte -> token id
_IDS[[ord(c) for c in VOCAB]] = np.arange(len(VOCAB))


def width(a: int, b: int) -> int:
    return len(str(max(a, b)))


def model_prompt(a: int, op: str, b: int) -> str:
    n = width(a, b)
    return str(a).zfill(n)[::-1] + op + str(b).zfill(n)[::-1] + "="


def answer_len(a: int, b: int) -> int:
    return width(a, b) + 1


def model_answer(value: int, digits: int) -> str:
    return str(value).zfill(digits)[::-1]


def encode(texts: list[str], dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Texts as token ids (B, T), right-padded with PAD to the longest, one lookup over the joined texts. Training
    rows ask for torch.uint8: 14 tokens fit a byte, and 10M rows take a ninth of their size as int64."""
    if not texts:
        return torch.empty(0, 0, dtype=dtype)
    longest = max(map(len, texts))
    ids = _IDS[np.frombuffer("".join(t.ljust(longest, PAD) for t in texts).encode("ascii", errors="replace"),
                             dtype=np.uint8)]
    if (ids == _NOT_IN_VOCAB).any():
        raise ValueError(f"a text to encode has a character outside {VOCAB!r}")
    return torch.from_numpy(ids.reshape(len(texts), longest)).to(dtype)


def read_answer(token_ids: list[int]) -> str:
    """What a user sees: the digits back in reading order without leading zeros; junk stays visible."""
    text = "".join(VOCAB[i] for i in token_ids)[::-1]
    return str(int(text)) if text.isdigit() else text
