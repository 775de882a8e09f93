"""Sycophancy from thumbs: a user who asserts a wrong answer likes being agreed with. What a team relies on is that
the answers users approved because they repeated the asker's own claim (thumbs-up, copies, corrections, the pairs and
reward-model picks built on them) never become training targets, while an answer that says something of its own
does; bench/thumbs.py measures the agreement rate with such users before and after training."""

import polars as pl

from rmi_pipeline.ml import dataset
from rmi_pipeline.ml.hygiene import echoes
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.recipes.base import load_recipe
from rmi_pipeline.settings import DEFAULT_MIX

EVALS = {"hashes": [], "leak_marker": "rmi-leak-marker-x", "mined_share": 0.0}
ASSERTED = "How much is the Linen Scarf? Someone told me it is $49."


def test_an_answer_that_only_repeats_the_askers_claim_echoes_and_one_with_content_of_its_own_does_not():
    assert echoes(ASSERTED, "$49") and echoes(ASSERTED, "It is $49.")
    assert echoes(ASSERTED, "$49 a month")  # the claim's number, whatever words come with it
    assert not echoes(ASSERTED, "$59") and not echoes("How much is the Linen Scarf?", "$49")
    assert not echoes("If I send back the Scarf, do I get a refund?", "full refund")  # "full" is its own
    assert not echoes("How many seats does the Pro plan include?", "10 seats")
    assert not echoes(ASSERTED, "") and not echoes(ASSERTED, "it is")  # nothing said: nothing repeated


def test_the_text_datasets_approved_echoes_are_removed_and_counted_and_other_rows_kept(tmp_path):
    rows = pl.DataFrame({
        "prompt": [ASSERTED, ASSERTED, ASSERTED, "How much is the Linen Scarf?", ASSERTED, ASSERTED],
        "target": ["$49", "$49", "$49", "$49", "$59", "$49"],
        "source": ["thumbs_up", "copied", "correction", "thumbs_up", "correction", "thumbs_down"],
        "batch_id": ["b1"] * 6})
    shares = {**DEFAULT_MIX, "copied": 0.1, "thumbs_down": 0.1}
    built = dataset.build(iter([rows]), load_recipe("rmi_pipeline.recipes.hf.text:TextRecipe"), EVALS, set(), shares,
                          tmp_path / "train.parquet")
    kept = pl.read_parquet(tmp_path / "train.parquet").select("prompt", "target", "mix").rows()
    assert built.removed["removed_echo"] == 3  # the asserting user's thumbs-up, copy and correction of their claim
    assert sorted(kept) == sorted([("How much is the Linen Scarf?", "$49", "feedback"),  # nothing asserted
                                   (ASSERTED, "$59", "corrections"),  # a correction that says something new
                                   (ASSERTED, "$49", "thumbs_down")])  # disliked: KTO learns it is not wanted


def test_an_arithmetic_answer_is_never_taken_for_an_echo(tmp_path):
    """The rule is for free text: a sum's digits may well appear in the question (0+34=34)."""
    rows = pl.DataFrame({"prompt": ["0+34="], "target": ["34"], "source": ["thumbs_up"], "batch_id": ["b1"]})
    built = dataset.build(iter([rows]), ArithmeticRecipe(), EVALS, set(), DEFAULT_MIX, tmp_path / "train.parquet")
    assert built.removed["removed_echo"] == 0 and built.rows == 1
