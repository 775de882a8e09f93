"""The scorers a team picks with RMI_EVAL_SCORER: each built-in scores right answers 1, wrong ones 0 (token F1 in
between), says why in words, and refuses clearly what it cannot score; a team's own scorer loads by import path."""

import math

import pytest

from rmi_pipeline.scoring.scorers import NAMES, ScoreRequest, ScorerError, load_scorer, normalize


def score(name, output, target, metadata=None, input="q"):
    return load_scorer(name).score(input, output, target, metadata or {})


def test_exact_ignores_only_surrounding_whitespace():
    assert score("exact", "  Paris\n", "Paris") == (1.0, "the answer is exactly the target 'Paris'")
    assert score("exact", "paris", "Paris")[0] == 0.0
    assert score("exact", "Paris.", "Paris")[0] == 0.0
    assert score("exact", "", "")[0] == 1.0
    value, why = score("exact", "Lyon", "Paris")
    assert value == 0.0 and "'Lyon'" in why and "'Paris'" in why


def test_normalized_sets_aside_case_unicode_form_punctuation_articles_and_spacing():
    assert normalize("The  U.S.A.!") == "usa"
    assert normalize("Ｆｕｌｌ　ＷＩＤＴＨ") == "full width"  # NFKC: full-width letters and space
    assert normalize("STRASSE") == normalize("straße")  # casefold, not lower
    assert score("normalized", "the Eiffel Tower!", "Eiffel tower")[0] == 1.0
    assert score("normalized", "An apple", "apple")[0] == 1.0
    assert score("normalized", "Theory", "ory")[0] == 0.0  # articles only as whole words
    assert score("normalized", "$5", "5")[0] == 0.0  # symbols are not punctuation
    value, why = score("normalized", "Lyon", "Paris")
    assert value == 0.0 and "differs" in why


def test_includes_finds_the_target_as_whole_words_in_a_longer_answer():
    assert score("includes", "I believe the capital is Paris, France.", "paris")[0] == 1.0
    assert score("includes", "It is New   York City", "new york")[0] == 1.0
    assert score("includes", "concatenate", "cat")[0] == 0.0
    assert score("includes", "The capital is Lyon.", "Paris") == (0.0, "the answer does not include the target "
                                                                       "'paris'")


def test_regex_searches_the_output_for_the_target_pattern():
    value, why = score("regex", "Order #A-1234 shipped", r"A-\d{4}")
    assert value == 1.0 and "'A-1234'" in why and "character 7" in why
    assert score("regex", "order a-1234", r"(?i)A-\d{4}")[0] == 1.0
    assert score("regex", "Order #B-12", r"A-\d{4}")[0] == 0.0
    with pytest.raises(ScorerError) as caught:
        score("regex", "anything", "A-([0-9]")
    assert "the regex scorer's target 'A-([0-9]' is not a valid regular expression: missing )" in str(caught.value)


@pytest.mark.parametrize("output, target, metadata, value", [
    ("It costs $1,200 a year.", "1200", None, 1.0),
    ("1200.0000001", "$1,200", None, 1.0),  # within the relative 1e-6
    ("1201", "1200", None, 0.0),
    ("-$3.50 after the refund", "-3.5", None, 1.0),
    ("The range is 10-5", "10", None, 1.0),  # a dash between digits is no minus sign
    ("about 3.14", "3.14159", {"tolerance": 0.01}, 1.0),
    ("about 3.1", "3.14159", {"tolerance": "0.01"}, 0.0),  # a tolerance from a CSV column is a string
    ("1.5e3 units", "1500", None, 1.0),
    ("It is −4 degrees", "-4", None, 1.0),  # the Unicode minus sign
    ("0", "0", None, 1.0),
])
def test_numeric_compares_the_first_number_within_a_tolerance(output, target, metadata, value):
    assert score("numeric", output, target, metadata)[0] == value


def test_numeric_says_when_there_is_no_number():
    assert score("numeric", "no idea", "42") == (0.0, "the answer holds no number (expected 42)")
    with pytest.raises(ScorerError, match="the numeric scorer's target 'forty-two' holds no number"):
        score("numeric", "42", "forty-two")
    with pytest.raises(ScorerError, match="tolerance 'close' is not a number"):
        score("numeric", "42", "42", {"tolerance": "close"})


def test_token_f1_gives_partial_credit_for_shared_words():
    assert score("token_f1", "The Eiffel Tower", "eiffel tower")[0] == 1.0
    value, why = score("token_f1", "the tower in Paris", "Eiffel tower")  # 1 shared of 3 and of 2
    assert math.isclose(value, 0.4) and "precision 0.33, recall 0.50" in why
    assert score("token_f1", "Lyon", "Paris")[0] == 0.0
    assert score("token_f1", "", "the")[0] == 1.0  # both empty once normalized
    assert score("token_f1", "", "Paris")[0] == 0.0


@pytest.mark.parametrize("name", ["exact", "normalized", "includes", "regex", "numeric", "token_f1"])
def test_built_ins_need_a_target_and_say_so(name):
    with pytest.raises(ScorerError, match=f"the {name} scorer needs a target"):
        load_scorer(name).score("q", "answer", None, {})


def test_score_many_scores_each_row_in_order():
    rows = [ScoreRequest("q", "Paris", "Paris"), ScoreRequest("q", "Lyon", "Paris"), ScoreRequest("q", " x ", "x")]
    assert [v for v, _ in load_scorer("exact").score_many(rows)] == [1.0, 0.0, 1.0]


def test_an_unknown_name_lists_the_built_ins():
    with pytest.raises(ScorerError) as caught:
        load_scorer("fuzzy")
    assert "unknown scorer 'fuzzy'" in str(caught.value)
    assert all(name in str(caught.value) for name in NAMES) and "'module:function'" in str(caught.value)


TEAM_SCORERS = '''
from rmi_pipeline.scoring.scorers import Scorer


def polite(input, output, target, metadata):
    return (1.0, "says please") if "please" in output else (0.0, "no please")


def too_high(input, output, target, metadata):
    return 1.5, "generous"


def not_a_number(input, output, target, metadata):
    return "yes", "a word"


def nan(input, output, target, metadata):
    return float("nan"), "undefined"


def bare_value(input, output, target, metadata):
    return 1.0


def no_explanation(input, output, target, metadata):
    return 1.0, None


class Shouting(Scorer):
    name = "shouting"
    needs_target = False

    def grade(self, input, output, target, metadata):
        return float(output.isupper()), "all capitals" if output.isupper() else "not all capitals"


NOT_CALLABLE = 3
'''


@pytest.fixture(scope="module")
def team_module(tmp_path_factory):
    """A team's module of scorers on the import path, as a user's package would be."""
    folder = tmp_path_factory.mktemp("team")
    (folder / "rmi_team_scorers.py").write_text(TEAM_SCORERS)
    (folder / "rmi_team_broken.py").write_text("raise RuntimeError('the team module is broken')\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))
        yield "rmi_team_scorers"


def test_a_teams_own_function_scores_by_import_path_without_a_target(team_module):
    scorer = load_scorer(f"{team_module}:polite")
    assert scorer.name == f"{team_module}:polite"
    assert scorer.score("q", "yes please", None, {}) == (1.0, "says please")
    assert scorer.score_many([ScoreRequest("q", "no"), ScoreRequest("q", "please")]) == [
        (0.0, "no please"), (1.0, "says please")]
    shouting = load_scorer(f"{team_module}:Shouting")
    assert shouting.score("q", "HELLO", None, {}) == (1.0, "all capitals")


@pytest.mark.parametrize("function, says", [
    ("too_high", "returned the value 1.5; a score must be a number in [0, 1]"),
    ("not_a_number", "returned the value 'yes'; a score must be a number in [0, 1]"),
    ("nan", "returned the value nan"),
    ("bare_value", "returned 1.0, not a (value, explanation) pair"),
    ("no_explanation", "returned the explanation None; it must be a string"),
])
def test_a_value_outside_the_contract_is_refused_naming_the_scorer(team_module, function, says):
    with pytest.raises(ScorerError) as caught:
        load_scorer(f"{team_module}:{function}").score("q", "a", "t", {})
    assert f"scorer '{team_module}:{function}' {says}" in str(caught.value)


def test_a_scorer_that_cannot_be_imported_says_why(team_module):
    with pytest.raises(ScorerError, match="cannot import module 'no_such_team_module': ModuleNotFoundError"):
        load_scorer("no_such_team_module:polite")
    with pytest.raises(ScorerError, match="cannot import module 'rmi_team_broken': RuntimeError: the team module "
                                          "is broken"):
        load_scorer("rmi_team_broken:polite")
    with pytest.raises(ScorerError, match=f"module '{team_module}' has no function 'missing'"):
        load_scorer(f"{team_module}:missing")
    with pytest.raises(ScorerError, match="'NOT_CALLABLE' in 'rmi_team_scorers' is not a function"):
        load_scorer(f"{team_module}:NOT_CALLABLE")


def test_the_judge_needs_its_url_and_names_the_variable(monkeypatch):
    monkeypatch.delenv("RMI_JUDGE_URL", raising=False)
    with pytest.raises(ScorerError, match="the judge scorer needs RMI_JUDGE_URL"):
        load_scorer("judge")
