"""The training dataset's rows in bulk: sources in, one Parquet file out, a chunk at a time.

Memory stays that of one chunk however long the history grows: each chunk is checked (usable, not an eval item,
not the mined hold-out, no n-gram shared with the evals) with the recipe's batch forms and appended to the file.
The weight of each source's rows needs every source's row count: it goes in the manifest, by source.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .hygiene import canonical_hashes, echoes, mined_holdout, ngram_hashes
from .mix import in_mix, mix_sources, weights


def schema() -> dict:
    """The columns every source's rows come in; a column a source does not have is null (`rejected`: the answer a
    pair's target was preferred to, for DPO; only pairs have it)."""
    import polars as pl

    return {"prompt": pl.String, "target": pl.String, "batch_id": pl.String, "source": pl.String,
            "scale": pl.Float64, "reference": pl.String, "teacher": pl.String, "rejected": pl.String}


@dataclass
class Built:
    """What went in and what came out: the counts the asset reports and its checks judge."""

    rows: int = 0
    by_source: dict[str, int] = field(default_factory=dict)  # rows per source of the training mix
    batches: set[str] = field(default_factory=set)  # feedback batches with a usable row, in the mix or not
    new_feedback_rows: int = 0  # usable rows of batches the champion did not learn from
    unusable: int = 0  # not a prompt or a target the recipe can train on
    leak_marker_rows: int = 0  # rows holding the eval suite's leak marker
    removed: Counter = field(default_factory=Counter)  # removed_eval_overlap, held_out_mined, removed_ngram_overlap,
    # removed_echo
    remaining_overlap: int = 0
    digest: str = ""  # of the rows' prompts and targets: part of the version's name
    weights: dict[str, float] = field(default_factory=dict)  # of a row of each source of the mix (ml/mix.py)


def build(chunks, recipe, evals: dict, trained_batches: set[str], shares: dict[str, float], out: Path) -> Built:
    """Rows from `chunks` (polars frames with the columns of `schema`, in order) into the Parquet file `out`, a row
    group a chunk, checked against the eval manifest `evals`, each row given its mix (new feedback is that of
    batches not in `trained_batches`); sources without a share are left out. The weights of the mix's sources
    (`Built.weights`) need every source's count, so they are not in the file: the manifest carries them."""
    import polars as pl
    import pyarrow.parquet as pq

    built, digest, writer, seen = Built(), hashlib.sha256(), None, 0
    eval_hashes = pl.Series(evals["hashes"], dtype=pl.String)
    eval_ngrams = set(evals.get("ngram_hashes", []))
    try:
        for chunk in chunks:
            if chunk.is_empty():
                continue
            chunk = chunk.select(pl.col(name).cast(kind) if name in chunk.columns else pl.lit(None, kind).alias(name)
                                 for name, kind in schema().items())
            marker = evals["leak_marker"]
            built.leak_marker_rows += chunk.filter(pl.any_horizontal(
                pl.col(c).str.contains(marker, literal=True) for c in ("prompt", "target", "rejected"))).height
            parsed = recipe.parse_prompts(chunk["prompt"])
            rejected_ok = chunk["rejected"].is_null() | recipe.valid_completions(chunk["rejected"])  # DPO encodes it
            usable = chunk.hstack(parsed.drop("valid").get_columns()).filter(
                parsed["valid"] & recipe.valid_completions(chunk["target"]) & rejected_ok)
            built.unusable += chunk.height - usable.height
            if recipe.text_recipe:
                usable = _no_echoes(usable, built)
            rows = _checked(usable, evals, eval_hashes, eval_ngrams, built)
            batches = set(rows["batch_id"].drop_nulls().unique().to_list())
            built.batches |= batches
            new = sorted(batches - trained_batches)
            seen += rows.height
            built.new_feedback_rows += int(rows["batch_id"].is_in(new).sum())
            rows = mix_sources(rows, new).filter(in_mix(shares))
            if rows.is_empty():
                continue
            for mix, n in rows.group_by("mix").len().iter_rows():
                built.by_source[mix] = built.by_source.get(mix, 0) + n
            digest.update(rows.select("prompt", "target").write_csv(include_header=False).encode())
            table = rows.to_arrow()
            writer = writer or pq.ParquetWriter(out, table.schema, compression="zstd")
            writer.write_table(table)
        if writer is None:  # no row at all: a recipe with no seed set, before any feedback, trains on nothing
            pq.write_table(pl.DataFrame(schema={**schema(), "skill": pl.String, "tier": pl.Int64, "mix": pl.String})
                           .to_arrow(), out)
    finally:
        if writer is not None:
            writer.close()
    built.weights = weights(built.by_source, shares) if seen else {}
    built.by_source = {m: built.by_source[m] for m in shares if m in built.by_source}
    built.rows, built.digest = sum(built.by_source.values()), digest.hexdigest()[:8]
    return built


ECHO_CHECKED = ("thumbs_up", "copied", "correction", "pair", "best_of_n")  # what users liked, wrote, or a model of
# their likes picked: it may echo their claim


def _no_echoes(rows, built: Built):
    """The rows without users' approval of an answer that only repeats their own claim (hygiene.echoes), counted."""
    import polars as pl

    echo = pl.Series([source in ECHO_CHECKED and echoes(prompt, target)
                      for prompt, target, source in rows.select("prompt", "target", "source").iter_rows()],
                     dtype=pl.Boolean)
    built.removed["removed_echo"] += int(echo.sum())
    return rows.filter(~echo)


def _checked(rows, evals: dict, eval_hashes, eval_ngrams: set[str], built: Built):
    """The usable rows (with their canonical form, skill and tier) that touch no eval item, without the canonical
    form; what was removed is counted in `built`."""
    import polars as pl

    prompt_hash = canonical_hashes(rows["canonical"])
    overlap = prompt_hash.is_in(eval_hashes)
    # corrected hard cases on the held-out side of the split are the mined eval slice (ml/hygiene.py); a pair may
    # hold such a correction
    mined = rows["source"].is_in(["correction", "pair"]) & mined_holdout(prompt_hash, evals["mined_share"])
    texts = rows.select("prompt", "target", "rejected").iter_rows() if eval_ngrams else []  # text recipes: row by row
    ngram = pl.Series([any(ngram_hashes(text, evals["ngram_n"]) & eval_ngrams for text in row if text is not None)
                       for row in texts] or [False] * rows.height, dtype=pl.Boolean)
    built.removed.update({"removed_eval_overlap": int((overlap & ~mined).sum()), "held_out_mined": int(mined.sum()),
                          "removed_ngram_overlap": int((ngram & ~overlap & ~mined).sum())})
    kept = ~(overlap | mined | ngram)
    built.remaining_overlap += int(prompt_hash.filter(kept).is_in(eval_hashes).sum())
    return rows.filter(kept).drop("canonical")
