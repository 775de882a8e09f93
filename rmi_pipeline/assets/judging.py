"""judge_agreement: how far the judge that scores the evals can be trusted, measured on answers people rated.

The judge grades the latest answers users rated (their thumbs joined to the answer by its response, as the gateway
stores them), without a reference, as it grades any answer; a thumbs-up is a pass. Answers a team labelled itself
(RMI_JUDGE_LABELS) join them, so a judge is measured before production has rated anything. Its true and false
positive rates, raw agreement and kappa, per slice, go to `judge/agreement.json`: candidate_evaluation corrects the
judged pass rate for those errors, and a judge that agrees with people below RMI_JUDGE_MIN_AGREEMENT blocks promotion
there.
"""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    MaterializeResult,
    MetadataValue,
    ResourceParam,
    asset,
)

from ..resources import layout
from ..resources.storage import ObjectStore
from ..resources.warehouse import Warehouse
from ..settings import Settings
from .evals import eval_scorer, keep_verdicts
from .feedback import feedback_events

UNSLICED = "unsliced"  # rated answers no slice was named for
RATED_ANSWERS = 400  # the latest rated answers the judge grades: enough for rates within about 0.05

AGREEMENT_CHECK = AssetCheckSpec(
    "judge_agrees_with_people", asset="judge_agreement",
    description="The judge agrees with people on at least RMI_JUDGE_MIN_AGREEMENT of the answers they rated (at "
                "least RMI_JUDGE_MIN_LABELS of them). Failing, it blocks promotion: a gate on a judge people "
                "disagree with would promote by the judge's taste.")


@asset(deps=[feedback_events], group_name="evaluation", kinds={"openai"}, check_specs=[AGREEMENT_CHECK])
def judge_agreement(context: AssetExecutionContext, settings: ResourceParam[Settings], storage: ObjectStore,
                    eval_store: ObjectStore, warehouse: Warehouse) -> MaterializeResult:
    """The judge (RMI_EVAL_SCORER=judge) grades the latest answers users rated and those in RMI_JUDGE_LABELS; its
    agreement with them per slice (true and false positive rates, kappa) and whether it may gate promotion. Nothing
    to do with another scorer."""
    import polars as pl

    from ..scoring.calibration import ALL, agreement, judge_verdict
    from ..scoring.contract import ScoreRequest

    if settings.evals.scorer != "judge":
        if storage.exists(layout.JUDGE_AGREEMENT):  # a judge used before must not gate what it no longer scores
            storage.delete(layout.JUDGE_AGREEMENT)
        return MaterializeResult(metadata={"status": f"no judge in use (RMI_EVAL_SCORER={settings.evals.scorer})"},
                                 check_results=[AssetCheckResult(check_name=AGREEMENT_CHECK.name, passed=True,
                                                                 description="No judge scores the evals.")])
    rated = warehouse.query(
        "SELECT prompt, completion, NULL::VARCHAR AS target, rating = 'up' AS up, skill AS slice "
        "FROM feedback_events "
        "WHERE rating IS NOT NULL AND source = 'user' AND completion IS NOT NULL ORDER BY ts DESC, event_id LIMIT ?",
        [RATED_ANSWERS])
    endpoint = settings.storage.s3_endpoint_url
    labelled = labelled_answers(settings.judge.labels, {"endpoint_url": endpoint} if endpoint else {})
    # "all" is every rated answer together (a recipe without slices names its one slice so too)
    rated = pl.concat([rated.select(labelled.columns).cast(labelled.schema), labelled]).with_columns(
        slice=pl.when(pl.col("slice").is_null() | (pl.col("slice") == ALL)).then(pl.lit(UNSLICED))
        .otherwise(pl.col("slice")))
    scorer = eval_scorer(settings, eval_store)
    try:
        judged = scorer.score_many([ScoreRequest(p, c, t) for p, c, t in rated.select(
            "prompt", "completion", "target").iter_rows()])
    finally:
        usage = keep_verdicts(eval_store, scorer)
    passes = [value >= 0.5 for value, _ in judged]
    by_slice = agreement(passes, rated["up"].to_list(), rated["slice"].to_list())
    overall = by_slice[ALL]
    bias = length_bias(passes, rated)
    verdict = judge_verdict(overall, settings.judge.min_agreement, settings.judge.min_labels)
    storage.write_json(layout.JUDGE_AGREEMENT, {
        "judge": scorer.identity, "model": settings.judge.model, "rated_answers": len(rated),
        "verdict": {"status": verdict.status, "blocks": verdict.blocks, "sentence": verdict.sentence},
        "slices": {name: a.as_dict() for name, a in by_slice.items()}})
    context.log.info(verdict.sentence)
    rows = ["| slice | rated | agreement | kappa | true positive rate | false positive rate |",
            "|---|---|---|---|---|---|"]
    rows += [f"| {name} | {a.n} | {_pct(a.agreement)} | {_num(a.kappa)} | {_pct(a.tpr)} | {_pct(a.fpr)} |"
             for name, a in by_slice.items()]
    return MaterializeResult(metadata={
        "status": verdict.status, "sentence": verdict.sentence, "rated_answers": len(rated),
        "agreement": _round(overall.agreement), "kappa": _round(overall.kappa),
        "true_positive_rate": _round(overall.tpr), "false_positive_rate": _round(overall.fpr),
        "slices": MetadataValue.md("\n".join(rows)), **bias, **usage,
    }, check_results=[AssetCheckResult(
        check_name=AGREEMENT_CHECK.name, passed=not verdict.blocks, severity=AssetCheckSeverity.WARN,
        description=verdict.sentence[:1000],
        metadata={"status": verdict.status, "agreement": _round(overall.agreement), "rated_answers": overall.n})])


def length_bias(passes: list[bool], rated) -> dict:
    """How much more often the judge passes a long answer people failed than a short one (answers longer in words
    than the median against the rest): judges favour length, and a team should see whether this one does."""
    from ..scoring.calibration import agreement

    words = rated["completion"].str.count_matches(r"\S+").to_list()
    if len(set(words)) < 2:
        return {}
    median = sorted(words)[len(words) // 2]
    by_length = agreement(passes, rated["up"].to_list(), ["long" if w > median else "short" for w in words])
    long, short = by_length.get("long"), by_length.get("short")
    if long is None or short is None or long.fpr is None or short.fpr is None:
        return {}
    return {"false_positive_rate_long_answers": round(long.fpr, 4),
            "false_positive_rate_short_answers": round(short.fpr, 4), "length_bias": round(long.fpr - short.fpr, 4)}


LABELS = {"pass": True, "fail": False, "up": True, "down": False, "true": True, "false": False, "1": True, "0": False}


def labelled_answers(urls, storage_options: dict):
    """(prompt, completion, target, up, slice) of the answers people labelled in the RMI_JUDGE_LABELS files: `input`,
    `output`, `label` (pass or fail, up or down, true or false), optional `target` (the reference the judge gets)
    and `slice`; a file or a row that is not so is refused with its name and row."""
    import io

    import fsspec
    import polars as pl

    schema = {"prompt": pl.String, "completion": pl.String, "target": pl.String, "up": pl.Boolean,
              "slice": pl.String}
    frames = [pl.DataFrame(schema=schema)]
    for url in urls:
        with fsspec.open(url, "rb", **(storage_options if url.startswith("s3://") else {})) as f:
            data = io.BytesIO(f.read())
        kind = url.lower().rsplit(".", 1)[-1]
        readers = {"jsonl": pl.read_ndjson, "json": pl.read_ndjson, "csv": pl.read_csv, "parquet": pl.read_parquet}
        if kind not in readers:
            raise ValueError(f"judge labels {url}: a .jsonl, .csv or .parquet file, not .{kind}")
        frame = readers[kind](data)
        missing = sorted({"input", "output", "label"} - set(frame.columns))
        if missing:
            raise ValueError(f"judge labels {url}: no column {', '.join(missing)} (input, output, label needed)")
        labels = frame["label"].cast(pl.String).str.to_lowercase().str.strip_chars()
        bad = [i for i, label in enumerate(labels.to_list()) if label not in LABELS]
        if bad:
            raise ValueError(f"judge labels {url}, row {bad[0] + 1}: label {frame['label'][bad[0]]!r} is not pass "
                             f"or fail ({len(bad)} such row(s))")
        optional = [(pl.col(name).cast(pl.String) if name in frame.columns else pl.lit(default, pl.String)).alias(name)
                    for name, default in (("target", None), ("slice", None))]
        frames.append(frame.with_columns(label=labels).select(
            pl.col("input").cast(pl.String).alias("prompt"), pl.col("output").cast(pl.String).alias("completion"),
            optional[0], pl.col("label").replace_strict(LABELS, return_dtype=pl.Boolean).alias("up"), optional[1]))
    return pl.concat(frames)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
