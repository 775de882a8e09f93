"""The training mix (RMI_MIX): which source each training row belongs to, and the weight that gives each source its
share of every batch, spread evenly over that source's rows.

New feedback is `feedback` (thumbs-up answers), `corrections`, `thumbs_down` (answers rated down without a
correction, for KTO) or `pairs` (an answer preferred to another, for DPO); implicit signals of unrated answers are
weak labels of their own sources: `copied` (taken for right: imitated like a thumbs-up) and `asked_again` (taken for
wrong: KTO-undesirable like a thumbs-down). Feedback the champion already learned from, the recipe's seed set and
what earlier champions made are `replay`, except a thumbs-down, a pair and an implicit signal, which train only in
the cycle after they came (against that cycle's warm start); what the champion made this turn keeps its source
(`practice`, `rl`, `hint_distill`, `self_label`, `best_of_n`). A source with share 0 contributes no rows.
"""

from __future__ import annotations

IMPLICIT = ("copied", "asked_again")  # the implicit signals (`meta.signal` of an unrated feedback): each its own source
FEEDBACK_MIX = {"thumbs_up": "feedback", "correction": "corrections", "thumbs_down": "thumbs_down",  # new feedback
                "pair": "pairs", **{signal: signal for signal in IMPLICIT}}
# measured against the model they came to (an implicit signal: a weak label, weighed by its own share and never by
# replay's): learned once, then dropped
NEVER_REPLAYED = ("thumbs_down", "pair", *IMPLICIT)
KTO_MIX = {"feedback": True, "copied": True, "thumbs_down": False, "asked_again": False}  # KTO's (un)desirable rows
UNDESIRABLE = tuple(m for m, desirable in KTO_MIX.items() if not desirable)  # KTO runs where one trains; never imitated
EARLIER_PRACTICE = "earlier_practice"  # rows earlier champions made in `practice`: replayed
REPLAYED = ("seed", EARLIER_PRACTICE)


def mix_sources(rows, new_batches: list[str]):
    """`rows` (columns source, batch_id) with the column `mix`: the training mix's source of each row."""
    import polars as pl

    is_new = pl.col("batch_id").is_in(new_batches)
    feedback = (pl.when(is_new).then(pl.col("source").replace_strict(FEEDBACK_MIX, default=None))
                .when(pl.col("source").is_in(NEVER_REPLAYED)).then(pl.lit(None, pl.String))  # learned before: dropped
                .otherwise(pl.lit("replay")))
    return rows.with_columns(mix=pl.when(pl.col("source").is_in(list(FEEDBACK_MIX))).then(feedback)
                             .when(pl.col("source").is_in(list(REPLAYED))).then(pl.lit("replay"))
                             .otherwise(pl.col("source")))


def in_mix(shares: dict[str, float]):
    """Whether a row (column mix) belongs to a source with a share: the others contribute no rows."""
    import polars as pl

    return pl.col("mix").replace_strict(shares, default=0.0) > 0


def weights(sizes: dict[str, int], shares: dict[str, float]) -> dict[str, float]:
    """The weight of a row of each source present (`sizes`: its rows): share / (total share present) / rows."""
    if not sizes:
        raise ValueError(f"the training mix {shares} leaves no rows: give replay or feedback a share")
    total = sum(shares[m] for m in sizes)
    return {m: shares[m] / total / n for m, n in sizes.items()}
