"""Character tokens and the model's view of a problem: digits least significant first, zero-padded.

'123+45=' -> '32100000' '+' '54000000' '=' then the answer '861000000'. Reversed digits let the model
produce the carry in the order it is computed; fixed widths put every place value at a fixed position.
"""

from __future__ import annotations

import torch

from .problems import WIDTH

VOCAB = "0123456789+-="
STOI = {c: i for i, c in enumerate(VOCAB)}
ANSWER_LEN = WIDTH + 1
PROMPT_LEN = 2 * WIDTH + 2
BLOCK_SIZE = PROMPT_LEN + ANSWER_LEN


def model_prompt(a: int, op: str, b: int) -> str:
    return str(a).zfill(WIDTH)[::-1] + op + str(b).zfill(WIDTH)[::-1] + "="


def model_answer(value: int) -> str:
    return str(value).zfill(ANSWER_LEN)[::-1]


def encode(texts: list[str]) -> torch.Tensor:
    return torch.tensor([[STOI[c] for c in t] for t in texts], dtype=torch.long)


def read_answer(token_ids: list[int]) -> str:
    """What a user sees: the digits back in reading order without leading zeros; junk stays visible."""
    text = "".join(VOCAB[i] for i in token_ids)[::-1]
    return str(int(text)) if text.isdigit() else text

# The model's place-value positions: operand digits by their place; '=' and each answer digit by the place of the
# digit they predict next. Segments tell the operands, the operator and the answer apart.
PLACE_IDS = list(range(WIDTH)) + [0] + list(range(WIDTH)) + list(range(ANSWER_LEN + 1))
SEGMENTS = [0] * WIDTH + [1] + [2] * WIDTH + [3] + [4] * ANSWER_LEN
