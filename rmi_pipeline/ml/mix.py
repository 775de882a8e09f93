"""The training mix (RMI_MIX): which source each training row belongs to, and the weight that gives each source its
share of every batch, spread evenly over that source's rows.

New feedback is `feedback` (thumbs-up answers) or `corrections`; feedback the champion already learned from, the
recipe's seed set and what earlier champions made are `replay`; what the champion made this turn keeps its source
(`practice`, `rl`, `hint_distill`, `self_label`). A source with share 0 contributes no rows.
"""

from __future__ import annotations

FEEDBACK_MIX = {"thumbs_up": "feedback", "correction": "corrections"}  # new feedback; learned before: replay
EARLIER_PRACTICE = "earlier_practice"  # rows earlier champions made in `practice`: replayed
REPLAYED = ("seed", EARLIER_PRACTICE)


def mix_sources(rows, new_batches: list[str]):
    """`rows` (columns source, batch_id) with the column `mix`: the training mix's source of each row."""
    import polars as pl

    is_new = pl.col("batch_id").is_in(new_batches)
    feedback = (pl.when(is_new).then(pl.col("source").replace_strict(FEEDBACK_MIX, default=None))
                .otherwise(pl.lit("replay")))
    return rows.with_columns(mix=pl.when(pl.col("source").is_in(list(FEEDBACK_MIX))).then(feedback)
                             .when(pl.col("source").is_in(list(REPLAYED))).then(pl.lit("replay"))
                             .otherwise(pl.col("source")))


def weigh(rows, shares: dict[str, float]) -> tuple[object, dict[str, int]]:
    """The rows of sources with a share, each weighted share / (total share present) / (rows of its source);
    and the rows per source, in the order of `shares`."""
    import polars as pl

    rows = rows.filter(pl.col("mix").replace_strict(shares, default=0.0) > 0)
    sizes = dict(rows.group_by("mix").len().iter_rows())
    if not sizes:
        raise ValueError(f"the training mix {shares} leaves no rows: give replay or feedback a share")
    total = sum(shares[m] for m in sizes)
    rows = rows.with_columns(weight=pl.col("mix").replace_strict(
        {m: shares[m] / total / n for m, n in sizes.items()}, return_dtype=pl.Float64))
    return rows, {m: sizes[m] for m in shares if m in sizes}
