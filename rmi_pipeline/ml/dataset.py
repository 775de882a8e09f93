"""The training dataset's rows in bulk: sources in, one weighted Parquet file out, a chunk at a time.

Memory stays that of one chunk however long the history grows: each chunk is checked (usable, not an eval item,
not the mined hold-out, no n-gram shared with the evals) with the recipe's batch forms and written aside; the
weights, which need every source's row count, are added as the chunks stream into the one file.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .hygiene import canonical_hashes, mined_holdout, ngram_hashes
from .mix import in_mix, mix_sources, weights

COLUMNS = {"prompt": "String", "target": "String", "batch_id": "String", "source": "String", "scale": "Float64",
           "reference": "String", "teacher": "String"}  # of every source's rows


def schema():
    import polars as pl

    return {name: getattr(pl, kind) for name, kind in COLUMNS.items()}


@dataclass
class Built:
    """What went in and what came out: the counts the asset reports and its checks judge."""

    rows: int = 0
    by_source: dict[str, int] = field(default_factory=dict)  # rows per source of the training mix
    batches: set[str] = field(default_factory=set)  # feedback batches with a usable row, in the mix or not
    new_feedback_rows: int = 0  # usable rows of batches the champion did not learn from
    unusable: int = 0  # not a prompt or a target the recipe can train on
    canary_rows: int = 0
    removed: Counter = field(default_factory=Counter)  # removed_eval_overlap, held_out_mined, removed_ngram_overlap
    remaining_overlap: int = 0
    digest: str = ""  # of the rows' prompts and targets: part of the version's name


def build(chunks, recipe, evals: dict, trained_batches: set[str], shares: dict[str, float], out: Path) -> Built:
    """Rows from `chunks` (polars frames with COLUMNS, in order) into the Parquet file `out`, checked against the
    eval manifest `evals`, each row given its mix (new feedback is that of batches not in `trained_batches`) and
    its weight (`ml/mix.py`); sources without a share are left out."""
    import polars as pl

    built, digest, parts = Built(), hashlib.sha256(), []
    eval_hashes = pl.Series(evals["hashes"], dtype=pl.String)
    eval_ngrams = set(evals.get("ngram_hashes", []))
    aside = out.parent / f"{out.name}.chunks"
    aside.mkdir(parents=True, exist_ok=True)
    for chunk in chunks:
        if chunk.is_empty():
            continue
        chunk = chunk.select(pl.col(name).cast(kind) for name, kind in schema().items())
        built.canary_rows += chunk.filter(pl.col("prompt").str.contains(evals["canary"], literal=True)
                                          | pl.col("target").str.contains(evals["canary"], literal=True)).height
        usable = chunk.filter(recipe.valid_prompts(pl.col("prompt")) & recipe.valid_completions(pl.col("target")))
        built.unusable += chunk.height - usable.height
        rows = _checked(usable, recipe, evals, eval_hashes, eval_ngrams, built)
        batches = set(rows["batch_id"].drop_nulls().unique().to_list())
        built.batches |= batches
        new = sorted(batches - trained_batches)
        built.new_feedback_rows += int(rows["batch_id"].is_in(new).sum())
        rows = mix_sources(rows, new).filter(in_mix(shares))
        if rows.is_empty():
            continue
        for mix, n in rows.group_by("mix").len().iter_rows():
            built.by_source[mix] = built.by_source.get(mix, 0) + n
        digest.update(rows.select("prompt", "target").write_csv(include_header=False).encode())
        parts.append(aside / f"{len(parts):06d}.parquet")
        rows.write_parquet(parts[-1])
    weight = weights(built.by_source, shares)
    pl.scan_parquet(parts).with_columns(weight=pl.col("mix").replace_strict(weight, return_dtype=pl.Float64)
                                        ).sink_parquet(out)
    for part in parts:
        part.unlink()
    aside.rmdir()
    built.by_source = {m: built.by_source[m] for m in shares if m in built.by_source}
    built.rows, built.digest = sum(built.by_source.values()), digest.hexdigest()[:8]
    return built


def _checked(rows, recipe, evals: dict, eval_hashes, eval_ngrams: set[str], built: Built):
    """The rows that touch no eval item, with their skill and tier; what was removed is counted in `built`."""
    import polars as pl

    
    prompt_hash = canonical_hashes(rows.select(recipe.canonicals(pl.col("prompt")).alias("c"))["c"])
    overlap = prompt_hash.is_in(eval_hashes)
    # corrected hard cases on the held-out side of the split are the mined eval slice (ml/hygiene.py)
    mined = (rows["source"] == "correction") & mined_holdout(prompt_hash, evals["mined_share"])
    pairs = rows.select("prompt", "target").iter_rows() if eval_ngrams else []  # text recipes: row by row
    ngram = pl.Series([any(ngram_hashes(text, evals["ngram_n"]) & eval_ngrams for text in pair) for pair in pairs]
                      or [False] * rows.height, dtype=pl.Boolean)
    built.removed.update({"removed_eval_overlap": int((overlap & ~mined).sum()), "held_out_mined": int(mined.sum()),
                          "removed_ngram_overlap": int((ngram & ~overlap & ~mined).sum())})
    kept = ~(overlap | mined | ngram)
    built.remaining_overlap += int(prompt_hash.filter(kept).is_in(eval_hashes).sum())
    slices = recipe.slices(pl.col("prompt"))
    return rows.filter(kept).with_columns(skill=slices.struct.field("skill"), tier=slices.struct.field("tier"))
