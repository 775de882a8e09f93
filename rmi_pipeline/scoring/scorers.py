"""Scorers: how one answer is scored against one eval item, as `score(input, output, target, metadata) -> (value in
[0, 1], explanation)`. Built-ins from exact match to a judge model; a team's own by import path ('module:function').

    scorer = load_scorer("numeric")
    scorer.score("How much is the Pro plan?", "It costs $1,200 a year.", "1200", {})   # (1.0, "...")
"""

from __future__ import annotations

import importlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, MutableMapping

from .contract import Scorer, ScoreRequest, ScorerError, checked

__all__ = ["NAMES", "Scorer", "ScoreRequest", "ScorerError", "checked", "load_scorer", "normalize"]

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize(text: str) -> str:
    """NFKC, casefolded, punctuation and the articles a/an/the removed, whitespace collapsed: how people compare
    short answers ("The U.S.A." and "usa" match), as SQuAD's evaluation does. Symbols ($, %, +) are kept."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    return " ".join(_ARTICLES.sub(" ", text).split())


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


class Exact(Scorer):
    """Passes when output and target are the same string once surrounding whitespace is stripped."""

    name = "exact"

    def grade(self, input, output, target, metadata):
        if output.strip() == target.strip():
            return 1.0, f"the answer is exactly the target {_short(target.strip())}"
        return 0.0, f"the answer {_short(output.strip())} is not exactly the target {_short(target.strip())}"


class Normalized(Scorer):
    """Passes when output and target are equal after `normalize` (case, Unicode form, punctuation, articles)."""

    name = "normalized"

    def grade(self, input, output, target, metadata):
        got, want = normalize(output), normalize(target)
        if got == want:
            return 1.0, f"the answer matches the target {_short(want)} once normalized"
        return 0.0, f"the answer {_short(got)} differs from the target {_short(want)} once normalized"


class Includes(Scorer):
    """Passes when the normalized target appears in the normalized output as whole words ("cat" is not in
    "concatenate"): a long answer that states the expected one passes."""

    name = "includes"

    def grade(self, input, output, target, metadata):
        got, want = normalize(output), normalize(target)
        if f" {want} " in f" {got} ":
            return 1.0, f"the answer includes the target {_short(want)}"
        return 0.0, f"the answer does not include the target {_short(want)}"


class Pattern(Scorer):
    """Passes when the target, a Python regular expression, is found anywhere in the output (`re.search`)."""

    name = "regex"

    def grade(self, input, output, target, metadata):
        try:
            pattern = re.compile(target)
        except re.error as error:
            raise ScorerError(f"the regex scorer's target {target!r} is not a valid regular expression: {error}") \
                from None
        found = pattern.search(output)
        if found:
            return 1.0, f"the pattern {target!r} matches {_short(found.group(0))} at character {found.start()}"
        return 0.0, f"the pattern {target!r} matches nowhere in the answer"


# a number as people write it: an optional sign, an optional currency sign, thousands commas, decimals, an exponent
_NUMBER = re.compile(r"([-+\u2212]?)\s?[$€£¥₹]?\s?([-+\u2212]?)"
                     r"(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?:[eE]([-+]?\d+))?")


def first_number(text: str) -> float | None:
    """The first number in `text` ("-$1,200.50" is -1200.5), or None; a dash between words or digits ("x-5",
    "10-5") is not a minus sign."""
    found = _NUMBER.search(text)
    if not found:
        return None
    outer, inner, digits, exponent = found.groups()
    outer_counts = outer and (found.start() == 0 or not text[found.start() - 1].isalnum())
    negative = (outer_counts and outer in "-\u2212") or (inner and inner in "-\u2212")
    value = float(digits.replace(",", "") + (f"e{exponent}" if exponent else ""))
    return -value if negative else value


class Numeric(Scorer):
    """Passes when the output's first number equals the target's within a tolerance: metadata "tolerance" (absolute)
    where the item sets one, else a relative 1e-6, so "1,200.00" and "$1200" both answer 1200."""

    name = "numeric"

    def grade(self, input, output, target, metadata):
        want = first_number(target)
        if want is None:
            raise ScorerError(f"the numeric scorer's target {target!r} holds no number")
        got = first_number(output)
        if got is None:
            return 0.0, f"the answer holds no number (expected {want:g})"
        if metadata.get("tolerance") is not None:
            try:
                tolerance = float(metadata["tolerance"])
            except (TypeError, ValueError):
                raise ScorerError(f"the numeric scorer's tolerance {metadata['tolerance']!r} is not a number") \
                    from None
            close, within = abs(got - want) <= tolerance, f"within {tolerance:g}"
        else:
            close, within = math.isclose(got, want, rel_tol=1e-6), "within a relative 1e-6"
        if close:
            return 1.0, f"the answer's number {got:g} equals the target {want:g} {within}"
        return 0.0, f"the answer's number {got:g} is not the target {want:g} {within}"


class TokenF1(Scorer):
    """The F1 of the normalized words the output and target share (SQuAD's): partial credit for a partly right
    answer; 1.0 when both are empty, 0.0 when only one is."""

    name = "token_f1"

    def grade(self, input, output, target, metadata):
        got, want = normalize(output).split(), normalize(target).split()
        if not got or not want:
            value = float(got == want)
            return value, f"F1 {value:.2f}: {'both are' if value else 'one of answer and target is'} empty"
        shared = sum((Counter(got) & Counter(want)).values())
        if not shared:
            return 0.0, f"F1 0.00: the answer shares no word with the target {_short(' '.join(want))}"
        precision, recall = shared / len(got), shared / len(want)
        value = 2 * precision * recall / (precision + recall)
        return value, f"F1 {value:.2f} (precision {precision:.2f}, recall {recall:.2f}, {shared} words shared)"


class FunctionScorer(Scorer):
    """A team's own scorer: a plain function with the contract, named by its import path; it decides for itself
    whether it needs a target."""

    needs_target = False

    def __init__(self, name: str, function: Callable[[str, str, str | None, dict], tuple[float, str]]):
        self.name, self._function = name, function

    def grade(self, input, output, target, metadata):
        return self._function(input, output, target, metadata)


BUILT_INS: dict[str, type[Scorer]] = {s.name: s for s in (Exact, Normalized, Includes, Pattern, Numeric, TokenF1)}
NAMES = (*BUILT_INS, "judge")


def load_scorer(name: str, judge_settings=None, cache: MutableMapping[str, dict] | None = None) -> Scorer:
    """A built-in by name, the judge (its settings default to RMI_JUDGE_*; `cache` keeps its answers), or
    'module:function' of a team's own (a Scorer subclass there is built with no arguments)."""
    name = name.strip()
    if name in BUILT_INS:
        return BUILT_INS[name]()
    if name == "judge":
        from ..settings import Judge
        from .judge import JudgeScorer

        return JudgeScorer(judge_settings if judge_settings is not None else Judge(), cache=cache)
    if ":" not in name:
        raise ScorerError(f"unknown scorer {name!r}: the built-ins are {', '.join(NAMES)}; or name your own as "
                          "'module:function'")
    module_name, _, attribute = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # an import error, or any error the module raises as it loads
        raise ScorerError(f"scorer {name!r}: cannot import module {module_name!r}: "
                          f"{type(error).__name__}: {error}") from error
    found = getattr(module, attribute, None)
    if isinstance(found, type) and issubclass(found, Scorer):
        return found()
    if not callable(found):
        raise ScorerError(f"scorer {name!r}: module {module_name!r} has no function {attribute!r}" if found is None
                          else f"scorer {name!r}: {attribute!r} in {module_name!r} is not a function")
    return FunctionScorer(name, found)
