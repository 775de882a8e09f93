"""Arithmetic problems as users type them: 'a+b=' and 'a-b=' (a >= b), of any number of digits.

Tier L means the larger operand has L digits; the generator draws both operands with L digits. There is no
largest tier but MAX_DIGITS, which bounds what one untrusted question can cost (and stays under Python's limit on
converting long digit strings to int).
"""

from __future__ import annotations

import random
import re

MAX_DIGITS = 1000  # per operand
SKILLS = ("add", "sub")
OPS = {"add": "+", "sub": "-"}
# ASCII digits only, the whole text (re's $ would let a trailing newline through, \d other scripts' digits)
_PROMPT = re.compile(rf"(\d{{1,{MAX_DIGITS}}})([+-])(\d{{1,{MAX_DIGITS}}})=", re.ASCII)
_ANSWER = re.compile(rf"\d{{1,{MAX_DIGITS + 1}}}", re.ASCII)


def parse(prompt: str) -> tuple[int, str, int] | None:
    """(a, op, b) of a well-formed prompt, else None."""
    m = _PROMPT.fullmatch(prompt)
    if not m:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    if op == "-" and a < b:  # answers are never negative
        return None
    return a, op, b


def parts(prompts):
    """`parse` over a polars String Series, lazily: the operands as digit strings a and b without leading zeros
    (compared by length, then text, never as ints), op, a_first (a >= b) and valid."""
    import polars as pl

    a, b, op = pl.col("a"), pl.col("b"), pl.col("op")
    # [0-9], not \d: the regex crate's \d is any script's digit, as `parse` (re.ASCII) is not; 0* leaves one digit
    groups = pl.col("prompt").str.extract_groups(r"^(0*)([0-9]+)([+-])(0*)([0-9]+)=$")
    a_first = (a.str.len_bytes() > b.str.len_bytes()) | ((a.str.len_bytes() == b.str.len_bytes()) & (a >= b))
    return (prompts.rename("prompt").to_frame().lazy()
            .select(groups.struct.rename_fields(["za", "a", "op", "zb", "b"]).struct.unnest())
            .with_columns(a_first=a_first)
            .with_columns(valid=((pl.col("za").str.len_bytes() + a.str.len_bytes() <= MAX_DIGITS)
                                 & (pl.col("zb").str.len_bytes() + b.str.len_bytes() <= MAX_DIGITS)
                                 & ((op == "+") | pl.col("a_first"))).fill_null(False)))


def parse_column(prompts):
    """`parse`, the canonical form and the slice of every prompt at once: the columns of Recipe.parse_prompts."""
    import polars as pl

    a, b, op = pl.col("a"), pl.col("b"), pl.col("op")
    return parts(prompts).select("valid", *(pl.when("valid").then(e).alias(name) for name, e in {
        "canonical": pl.when(op == "-").then(pl.concat_str(a, op, b, pl.lit("=")))
        .when("a_first").then(pl.concat_str(b, op, a, pl.lit("=")))
        .otherwise(pl.concat_str(a, op, b, pl.lit("="))),
        "skill": pl.when(op == "+").then(pl.lit("add")).otherwise(pl.lit("sub")),
        "tier": pl.max_horizontal(a.str.len_bytes(), b.str.len_bytes()).cast(pl.Int64)}.items())).collect()


def answers(texts):
    """`is_answer` of every text of a polars String Series (false for a null)."""
    import polars as pl

    return texts.to_frame("t").select((pl.col("t").str.contains(r"^[0-9]+$")
                                       & (pl.col("t").str.len_bytes() <= MAX_DIGITS + 1)).fill_null(False)).to_series()


def is_answer(text: str) -> bool:
    return bool(_ANSWER.fullmatch(text))


def solve(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def tier_of(a: int, b: int) -> int:
    return len(str(max(a, b)))


def operand(rng: random.Random, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def problem(rng: random.Random, skill: str, tier: int) -> tuple[str, int]:
    a, b = operand(rng, tier), operand(rng, tier)
    if skill == "sub" and a < b:
        a, b = b, a
    op = OPS[skill]
    return f"{a}{op}{b}=", solve(a, op, b)


def distinct_problems(skill: str, tier: int) -> int:
    """How many different problems a slice has (addition counted up to operand order)."""
    n = 10 if tier == 1 else 9 * 10 ** (tier - 1)
    return n * (n + 1) // 2
