"""Character tokens and the model's view of a problem: digits least significant first, zero-padded to its width.

'123+45=' -> '321' '+' '540' '=' then the answer '8610'. Reversed digits let the model produce the carry in the
order it is computed; both operands padded to the longer one's width put digits of one place value at the same
place of their segment, and the answer has one digit more. Rows of a batch are right-padded with PAD.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported where a tensor is made: reading feedback finds prompts' slices without it
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


def encode(texts: list[str], dtype: torch.dtype | None = None) -> torch.Tensor:
    """Texts as token ids (B, T), right-padded with PAD to the longest, one lookup over the joined texts; int64
    unless `dtype` says otherwise. Training rows ask for torch.uint8: 14 tokens fit a byte, and 10M rows take a
    ninth of their size as int64."""
    longest = max(map(len, texts), default=0)
    ids = _IDS[np.frombuffer("".join(t.ljust(longest, PAD) for t in texts).encode("ascii", errors="replace"),
                             dtype=np.uint8)]
    return _tensor(ids, len(texts), longest, dtype)


def _tensor(ids: np.ndarray, rows: int, width: int, dtype: torch.dtype | None) -> torch.Tensor:
    """Looked-up token ids as a (rows, width) tensor of `dtype` (int64 unless given); a character outside VOCAB is
    an error."""
    import torch

    if (ids == _NOT_IN_VOCAB).any():
        raise ValueError(f"a text to encode has a character outside {VOCAB!r}")
    return torch.from_numpy(ids.reshape(rows, width)).to(dtype or torch.long)


def model_rows(prompts, answers):
    """model_prompt + model_answer of every (prompt, answer) of two polars String Series at once, as a frame of
    `text` and `answer_start` (where the answer begins), and `trainable`: false where the prompt is not a problem
    or the answer not digits that fit its width."""
    import polars as pl

    from .problems import MAX_DIGITS, parts

    a, b, n = pl.col("a"), pl.col("b"), pl.col("width")
    answer = pl.col("answer").str.strip_chars_start("0")
    answer = pl.when(answer == "").then(pl.lit("0")).otherwise(answer)
    rows = parts(prompts).with_columns(answer=answers).with_columns(
        width=pl.max_horizontal(a.str.len_bytes(), b.str.len_bytes()), answer=answer)
    return rows.select(
        text=pl.concat_str(a.str.zfill(n).str.reverse(), "op", b.str.zfill(n).str.reverse(), pl.lit("="),
                           pl.col("answer").str.zfill(n + 1).str.reverse()),
        answer_start=2 * n + 2,
        trainable=(pl.col("valid") & pl.col("answer").str.contains(r"^[0-9]+$")
                   & (pl.col("answer").str.len_bytes() <= pl.min_horizontal(n + 1, MAX_DIGITS + 1))).fill_null(False),
    ).collect()


def encode_column(texts, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`encode` of a polars String Series, without a Python string per row: right-padded in polars, looked up from
    the bytes arrow holds them in."""
    import pyarrow as pa

    if texts.len() == 0:
        return _tensor(_IDS[:0], 0, 0, dtype)
    longest = int(texts.str.len_bytes().max())
    column = texts.str.pad_end(longest, PAD).to_arrow().cast(pa.large_string())
    column = pa.concat_arrays(column.chunks) if isinstance(column, pa.ChunkedArray) else column
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64, count=len(column) + 1, offset=column.offset * 8)
    start, end = int(offsets[0]), int(offsets[-1])
    if texts.null_count() or end - start != len(column) * longest:  # a character of several bytes: not ASCII
        raise ValueError(f"a text to encode has a character outside {VOCAB!r}")
    ids = _IDS[np.frombuffer(column.buffers()[2], dtype=np.uint8, count=end - start, offset=start)]
    return _tensor(ids, len(column), longest, dtype)


def read_answer(token_ids: list[int]) -> str:
    """What a user sees: the digits back in reading order without leading zeros; junk stays visible."""
    text = "".join(VOCAB[i] for i in token_ids)[::-1]
    return str(int(text)) if text.isdigit() else text
