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


def parts(prompt):
    """`parse` over a polars String column: a struct of a and b as digit strings without leading zeros (compared by
    length, then text) and op; null where the prompt is not well formed."""
    import polars as pl

    # [0-9], not \d: the regex crate's \d is any script's digit, as `parse` (re.ASCII) is not
    groups = prompt.str.extract_groups(r"^([0-9]+)([+-])([0-9]+)=$")
    a, op, b = (groups.struct.field(n) for n in ("1", "2", "3"))
    short = (a.str.len_bytes() <= MAX_DIGITS) & (b.str.len_bytes() <= MAX_DIGITS)
    a, b = (pl.when(x.str.strip_chars_start("0") == "").then(pl.lit("0")).otherwise(x.str.strip_chars_start("0"))
            for x in (a, b))
    a_at_least_b = (a.str.len_bytes() > b.str.len_bytes()) | ((a.str.len_bytes() == b.str.len_bytes()) & (a >= b))
    ok = short & ((op == "+") | a_at_least_b)
    return pl.when(ok).then(pl.struct(a=a, op=op, b=b, a_at_least_b=a_at_least_b))


def answers(text):
    """`is_answer` over a polars String column (false for a null)."""
    return (text.str.contains(r"^[0-9]+$") & (text.str.len_bytes() <= MAX_DIGITS + 1)).fill_null(False)


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
