"""Word-list tasks in free text: 'Reverse the words: owl cat yak' -> 'yak cat owl', and the same for sorting.

Tier L asks about L + 1 words drawn from WORDS (repeats allowed). Users phrase an instruction several ways
(INSTRUCTIONS); the problem is the skill and the words, whatever the phrasing. The verifier's critique is a
sentence a person (or the model, as a hint) can act on: each word that is wrong and what it should be.
"""

from __future__ import annotations

import random
import re

SKILLS = ("reverse", "sort")
TIERS = tuple(range(1, 7))  # 2 to 7 words
INSTRUCTIONS = {
    "reverse": ("Reverse the words", "Reverse", "Write these words in reverse order"),
    "sort": ("Sort the words", "Sort", "Put these words in alphabetical order"),
}
WORDS = tuple("""
    ant bat bee cat cod cow cub dog eel elk emu fly fox gnu hen jay koi owl pig ram rat yak ape asp boa bug
    bull calf carp clam crab crow deer dove duck fish frog goat hare hawk ibis kite lamb lark lion mole moth
    mule newt orca puma seal slug swan toad tuna vole wasp wolf worm wren
""".split())
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh")
_PROMPT = re.compile(r"(?P<instruction>[A-Za-z ]+): (?P<words>[a-z]+(?: [a-z]+)*)(?:\nHint: (?P<hint>[^\n]+))?")
_SKILL_OF = {text.lower(): skill for skill, texts in INSTRUCTIONS.items() for text in texts}


def parse(prompt: str) -> tuple[str, tuple[str, ...]] | None:
    """(skill, words) of a well-formed prompt (a coach's hint may follow on a line of its own), else None."""
    m = _PROMPT.fullmatch(prompt)
    if not m:
        return None
    skill = _SKILL_OF.get(m["instruction"].lower())
    words = tuple(m["words"].split(" "))
    if skill is None or not 2 <= len(words) <= TIERS[-1] + 1 or not set(words) <= _WORD_SET:
        return None
    return skill, words


def solve(skill: str, words: tuple[str, ...]) -> str:
    return " ".join(reversed(words) if skill == "reverse" else sorted(words))


def prompt(skill: str, words: tuple[str, ...], phrasing: int = 0) -> str:
    return f"{INSTRUCTIONS[skill][phrasing]}: {' '.join(words)}"


def draw(rng: random.Random, tier: int) -> tuple[str, ...]:
    return tuple(rng.choice(WORDS) for _ in range(tier + 1))


def is_answer(text: str) -> bool:
    words = text.split(" ")
    return 1 <= len(words) <= TIERS[-1] + 1 and set(words) <= _WORD_SET


def critique(skill: str, words: tuple[str, ...], answer: str) -> tuple[float, str]:
    """(reward, critique): 1 for the right list; else sentences naming what to fix: every wrong word and what it
    should be, or for a list of the wrong length, that and the first word that goes wrong."""
    want = solve(skill, words).split(" ")
    if not is_answer(answer):
        return 0.0, "The answer must be the words of the list, separated by single spaces."
    got = answer.split(" ")
    if got == want:
        return 1.0, "Correct."
    wrong = [i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w]
    if len(got) != len(want):
        first = wrong[0] if wrong else min(len(got), len(want))
        return 0.0, (f"The answer has {len(got)} words; it should have {len(want)}."
                     + (f" The {ORDINALS[first]} word should be {want[first]}." if first < len(want) else ""))
    return 0.0, " ".join(f"The {ORDINALS[i]} word should be {want[i]}, not {got[i]}." for i in wrong)


def distinct_problems(tier: int) -> int:
    return len(WORDS) ** (tier + 1)


_WORD_SET = frozenset(WORDS)
