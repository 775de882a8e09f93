"""The training program: one candidate trained outside the orchestrator's process, through Dagster Pipes.

    python -m rmi_pipeline.training.program      (launched by the candidate_model asset, never by hand)

candidate_model starts it with a Pipes client: a local subprocess by default, a Kubernetes pod in a deployment
(docs/how-to/production.md). Everything it needs arrives as Pipes extras; it reads the dataset and the warm-start
checkpoint from the object store, trains with ml/train.fit, writes its checkpoint back to the object store and
reports progress, the loss curve and its metrics to Dagster. It never talks to MLflow (the asset registers the
model from the reported checkpoint), so a training pod needs the object store and nothing else. It imports
dagster_pipes, never dagster.

Under DDP Lightning starts this module again for every other process. Those read the same Pipes context but
never open the message channel: only global rank 0 reports and writes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from dagster_pipes import PipesDefaultContextLoader, PipesEnvVarParamsLoader, open_dagster_pipes

# the dataset's columns training reads (not its batch ids or sources: the mix says what a row is)
READ = ("prompt", "target", "mix", "scale", "reference", "teacher", "rejected", "skill", "tier")
RANK_VARIABLES = ("RANK", "NODE_RANK", "GROUP_RANK", "LOCAL_RANK")  # set by Lightning, torchrun or a job operator
NUDGE = signal.SIGUSR2  # sent to the main thread alone, to end a system call it waits in


def is_global_zero() -> bool:
    """Decided from the environment before any training starts: Lightning sets LOCAL_RANK for the processes it
    starts, a multi-node launcher sets NODE_RANK or RANK."""
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)


def read_extras() -> Mapping[str, Any]:
    """The extras of the Pipes context, without opening the message channel (for ranks other than 0)."""
    params = PipesEnvVarParamsLoader().load_context_params()
    with PipesDefaultContextLoader().load_context(params) as data:
        return data["extras"]


def _read(uri: str, options: Mapping[str, Any]) -> bytes:
    import fsspec

    with fsspec.open(uri, "rb", **_for(uri, options)) as f:
        return f.read()


def _rows(recipe, module, uri: str, options: Mapping[str, Any], text: bool = False):
    """The dataset as (data, texts, files), read, encoded and written a row group at a time: no more than a row
    group is ever in memory as text or padded tokens. `data`: every row's mix, scale, skill and tier, in compact types;
    `files`: every row's tokens and loss mask (ml/rows.py); `texts`: all columns and the row number `index` of the
    rows whose text the objective reads again (wrong RL answers' and hinted successes'; every row with `text`, for a
    teacher to label and to compare tokens on; KTO's and DPO's rows are read again for the rows drawn, _texts_of).
    Other rows' strings would cost gigabytes at 77M rows, and a polars filter keeps the whole buffers it filters:
    arrow's copies."""
    import fsspec
    import numpy as np
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..ml.rows import RowFiles

    # fit reads scales as float32 (a wrong RL answer's is cut from its text row's float64)
    compact = {"mix": pl.Categorical, "scale": pl.Float32, "skill": pl.Categorical, "tier": pl.Int32}
    frames, texts, files, count = [], [], RowFiles(), 0
    with fsspec.open(uri, "rb", **_for(uri, options)) as f:
        dataset = pq.ParquetFile(f)
        columns = [c for c in dataset.schema_arrow.names if c in READ]
        for group in range(dataset.num_row_groups):
            table = dataset.read_row_group(group, columns=columns)
            if not table.num_rows:  # a dataset of no rows (nothing to learn from yet) is one empty row group
                continue
            table = table.append_column("index", pa.array(np.arange(count, count + table.num_rows)))
            part = pl.from_arrow(table)
            files.append(*recipe.encode(module, part["prompt"], part["target"]))
            frames.append(part.select(pl.col(c).cast(kind) if c in part.columns else pl.lit(None, kind).alias(c)
                                      for c, kind in compact.items()))
            read_again = part.select(pl.any_horizontal(pl.repeat(False, pl.len()), *(
                pl.col(c).is_not_null() for c in ("reference", "teacher") if c in part.columns))).to_series()
            texts.append(part if text else pl.from_arrow(table.filter(read_again.to_arrow())))
            count += table.num_rows
    if not frames:
        return pl.DataFrame(schema=compact), pl.DataFrame(), files
    return pl.concat(frames), pl.concat(texts), files


def _texts_of(uri: str, options: Mapping[str, Any], rows):
    """The text columns and the row number `index` of the dataset's rows numbered `rows` (sorted, unique), read a
    row group at a time."""
    import fsspec
    import numpy as np
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted, frames, count = rows.numpy(), [], 0
    with fsspec.open(uri, "rb", **_for(uri, options)) as f:
        dataset = pq.ParquetFile(f)
        columns = [c for c in dataset.schema_arrow.names if c in READ]
        for group in range(dataset.num_row_groups):
            size = dataset.metadata.row_group(group).num_rows
            first, last = np.searchsorted(wanted, [count, count + size])
            if last > first:
                table = dataset.read_row_group(group, columns=columns).take(pa.array(wanted[first:last] - count))
                frames.append(pl.from_arrow(table.append_column("index", pa.array(wanted[first:last]))))
            count += size
    return pl.concat(frames)


def _per_row(rows: int, at, values):
    """A per-row index column: `values` at rows `at`, -1 elsewhere (int32: 77M rows' int64 is 0.6 GB)."""
    import torch

    column = torch.full((rows,), -1, dtype=torch.int32)
    column[at] = values.int()
    return column


def _at(frame):
    """The rows a frame's `index` column numbers, to index per-row tensors with."""
    import torch

    return torch.from_numpy(frame["index"].to_numpy().astype("int64"))


def _by_mix(mix, weights: Mapping[str, float]) -> tuple:
    """(the training mix's sources present, in the order they come; each row's source id, a byte; each row's
    weight) of a column of mix names: a polars replace on a Categorical column builds every row's string."""
    import numpy as np
    import polars as pl
    import torch

    names = mix.unique(maintain_order=True).to_list()
    sources = torch.tensor(mix.cast(pl.Enum(names)).to_physical().to_numpy())
    return names, sources, torch.from_numpy(np.array([weights[n] for n in names], dtype=np.float64)[sources.numpy()])


def _ids(names: list[str], kinds):
    """The source ids (_by_mix's) of the mixes in `kinds`, a tensor."""
    import torch

    return torch.tensor([i for i, name in enumerate(names) if name in kinds], dtype=torch.long)


def _taught(recipe, module, teach: Mapping[str, Any], data, texts, files, mix_weights: Mapping[str, float],
            checkpoint: bytes, seed: int, pipes) -> tuple:
    """The dataset with the teacher's labels added (mix TAUGHT, `label_share` of every batch) to `data`, `texts`
    and the row `files` (_rows'): on prompts of the slices it is reliable on, and with a verifier on the other slices'
    prompts it answers right; and `module.distill` set where the teacher's distributions can teach it. Returns (data,
    texts, {"weights": the taught rows' weight, "report": what the run reports about its teaching})."""
    import polars as pl

    from ..ml.distill import (
        TAUGHT,
        Distillation,
        checked,
        prompts_to_label,
        shared_vocabulary,
        taught_weight,
        teacher_labels,
    )
    from ..recipes.base import slice_name

    say = pipes.log.info if pipes is not None else (lambda _: None)
    teacher = recipe.load_checkpoint(checkpoint).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    asked = [] if recipe.has("generator") or texts.is_empty() else list(zip(
        texts["prompt"].to_list(), [slice_name(s, t) for s, t in zip(texts["skill"], texts["tier"], strict=True)],
        strict=True))
    per_slice = int(teach["labels_per_slice"])
    prompts = prompts_to_label(recipe, list(teach["reliable"]), per_slice, seed, asked)
    say(f"teaching: the teacher labels {len(prompts)} prompts of {len(teach['reliable'])} slices it is reliable on")
    prompts, answers = teacher_labels(recipe, teacher, prompts)
    report = {"teacher_labels": len(answers)}
    others = list(teach.get("unreliable", ())) if recipe.has("verifier") else []
    if others:
        asked_others = prompts_to_label(recipe, others, per_slice, seed + 1, asked)
        right = checked(recipe, *teacher_labels(recipe, teacher, asked_others))
        say(f"teaching: of {len(asked_others)} prompts of {len(others)} slices it is not reliable on, the verifier "
            f"accepts {len(right[0])} of its answers")
        prompts, answers = prompts + right[0], answers + right[1]
        report |= {"teacher_labels": len(answers), "checked_labels": len(right[0])}
    if answers:
        files.append(*recipe.encode(module, prompts, answers))
        skills = [recipe.slice_of(p) for p in prompts]
        rows = pl.DataFrame({"prompt": prompts, "target": answers, "mix": [TAUGHT] * len(prompts),
                             "scale": [1.0] * len(prompts), "skill": [s for s, _ in skills],
                             "tier": [t for _, t in skills], "index": range(len(data), len(data) + len(prompts))})
        data = pl.concat([data, rows.select(data.columns).cast(data.schema)])
        texts = pl.concat([texts, rows.cast({c: texts.schema[c] for c in rows.columns if c in texts.schema})],
                          how="diagonal_relaxed")
    _, _, others = _by_mix(data["mix"].head(len(data) - len(answers)), mix_weights)
    weights = {TAUGHT: taught_weight(float(teach["label_share"]), others, len(answers))}
    sample = texts.head(16)  # the rows the two models must read alike
    why = shared_vocabulary(recipe, teacher, module, sample["prompt"].to_list(), sample["target"].to_list()) \
        if len(sample) else "there is no row to compare the two models' tokens on"
    if why is None and float(teach["weight"]) > 0:
        module.distill = Distillation(teacher, float(teach["temperature"]), float(teach["weight"]))
        report["distillation"] = f"{'labels and ' if answers else ''}next-token distributions (T=" \
                                 f"{teach['temperature']}, weight {teach['weight']})"
    else:
        report["distillation"] = f"labels only: {why or 'RMI_TEACH_WEIGHT is 0'}"
    say(f"teaching: {report['distillation']}; {len(answers)} labels")
    return data, texts, {"weights": weights, "report": report}


def _write(uri: str, data: bytes, options: Mapping[str, Any]) -> None:
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri, **_for(uri, options))
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, data)


def _for(uri: str, options: Mapping[str, Any]) -> dict:
    """Storage options apply to the object store's protocol only (an S3 endpoint means nothing to file://)."""
    return dict(options) if uri.startswith(("s3://", "s3a://")) else {}


def train(extras: Mapping[str, Any], pipes=None, callbacks: list | None = None) -> dict | None:
    """Train one candidate; on global rank 0 write its checkpoint and return the metrics to report (`callbacks`:
    more Lightning callbacks, a bench's evaluations)."""
    import numpy as np
    import polars as pl
    import torch

    from ..ml.mix import KTO_MIX, UNDESIRABLE
    from ..ml.objective import dpo_reference, kto_reference, taught_by_teacher
    from ..ml.rl import first_mistake
    from ..ml.train import fit
    from ..recipes.base import load_recipe, slice_name
    from ..settings import Training

    recipe = load_recipe(extras["recipe"])
    storage = extras.get("storage_options") or {}
    steps, seed = int(extras["steps"]), int(extras["seed"])
    torch.manual_seed(seed)  # the same dataset and seed give the same candidate
    if extras.get("warm_start_uri"):  # the champion's architecture and weights, a fresh optimizer
        module = recipe.load_checkpoint(_read(extras["warm_start_uri"], storage), extras["learning_rate"], steps)
    else:
        module = recipe.build_model(extras["learning_rate"], steps, size=extras["model_size"])
    kto = any(m in extras["mix_weights"] for m in UNDESIRABLE)  # undesirable rows (KTO_MIX): KTO, with the desirable
    dpo = "pairs" in extras["mix_weights"]  # preference pairs train: DPO
    teach = extras.get("teach")
    data, texts, files = _rows(recipe, module, extras["dataset_uri"], storage, text=bool(teach))
    taught = {}
    if teach:  # a new generation or a derivative: the champion's labels and next-token distributions
        data, texts, taught = _taught(recipe, module, teach, data, texts, files, extras["mix_weights"],
                                      _read(teach["teacher_uri"], storage), seed, pipes)
    if not len(data):  # a recipe with no seed set, before any feedback: the first model is the one it brings
        _write(extras["checkpoint_uri"], recipe.checkpoint(module), storage)
        return {"tokens_trained": 0, "final_loss": float("nan"), "steps_done": 0, "train_seconds": 0.0,
                "steps_per_second": 0.0, "stopped_by_time": False, "world_size": 1,
                "parameters": sum(p.numel() for p in module.parameters()), "rows": 0,
                "checkpoint": extras["checkpoint_uri"]}
    rows = files.rows()
    names, sources, weights = _by_mix(data["mix"], {**extras["mix_weights"], **taught.get("weights", {})})
    scales = torch.tensor(data["scale"].to_numpy())
    if "reference" in texts.columns and texts["reference"].is_not_null().any():  # wrong RL answers and a right one
        wrong = texts.filter(pl.col("reference").is_not_null())
        reference, _ = recipe.encode(module, wrong["prompt"], wrong["reference"])
        at = _at(wrong)
        tokens, mask = rows.batch(at)
        cut = first_mistake(tokens, mask, reference)
        # a row's loss is a mean over its answer tokens
        scales[at] = (torch.from_numpy(wrong["scale"].to_numpy()) * (cut.sum(1) / mask.sum(1).clamp(min=1))).float()
        rows.set_mask(at, cut)
    teacher_rows = None
    if (extras.get("hint_distillation") or recipe.hint_distillation) == "tokens" and "teacher" in texts.columns:
        hinted = texts.filter(pl.col("teacher").is_not_null())
        at = _at(hinted)
        teacher_rows = _per_row(len(data), at, taught_by_teacher(recipe, module, hinted["teacher"].to_list(),
                                                                 hinted["target"].to_list()))
        scales[at] = 0  # they learn from it only
    focus = set(extras.get("focus") or [])
    if focus:  # a regression cycle: weight the regressed slices up
        slices = data.select("skill", "tier").unique()
        slices = slices.filter(pl.Series([slice_name(s, t) in focus for s, t in slices.iter_rows()], dtype=pl.Boolean))
        focused = data.with_row_index().join(slices, on=["skill", "tier"], how="semi", nulls_equal=True)
        weights[_at(focused)] *= extras["focus_weight"]
    kto_rows = dpo_rows = None  # filled by `references` with the rows fit draws
    if kto:  # an undesirable row is never imitated
        kto_rows = torch.full((len(data),), -1, dtype=torch.int32)
        scales[torch.isin(sources, _ids(names, UNDESIRABLE))] = 0
    if dpo:  # a pair teaches by DPO alone: its chosen answer is imitated by its own row (a correction or a thumbs-up)
        dpo_rows = torch.full((len(data),), -1, dtype=torch.int32)
        scales[torch.isin(sources, _ids(names, ["pairs"]))] = 0

    def references(drawn: torch.Tensor) -> None:
        """The warm-start model's log-probs, the frozen references, of the KTO rows and pairs this process draws:
        a few thousand rows of a history of millions."""
        if kto:
            rated, counts = drawn[torch.isin(sources[drawn], _ids(names, KTO_MIX))].unique(return_counts=True)
            if len(rated):
                text = _texts_of(extras["dataset_uri"], storage, rated)
                kto_rows[rated] = kto_reference(
                    recipe, module, text["prompt"].to_list(), text["target"].to_list(),
                    text["mix"].replace_strict(KTO_MIX).to_list(), text["tier"].to_list(), float(extras["kto_beta"]),
                    counts.double()).int()
        if dpo:
            pairs = drawn[torch.isin(sources[drawn], _ids(names, ["pairs"]))].unique()
            if len(pairs):
                text = _texts_of(extras["dataset_uri"], storage, pairs)
                dpo_rows[pairs] = dpo_reference(recipe, module, text["prompt"].to_list(), text["target"].to_list(),
                                                text["rejected"].to_list(), float(extras["dpo_beta"])).int()

    row_count = len(data)
    by_mix = {f"rows_{n}": int(c) for n, c in zip(names, np.bincount(sources.numpy()), strict=True)}
    del data, texts  # not read again: their memory goes to training

    trainer = Training(**extras["trainer"]).trainer_options()  # resolved here: "auto" means this machine's GPU

    def report(step: int, total: int, loss: float) -> None:
        pipes.log.info(f"training step {step}/{total} loss {loss:.4f}")
        pipes.report_custom_message({"train_loss": loss, "step": step, "timestamp_ms": int(time.time() * 1000)})

    result = fit(module, rows, weights=weights, max_steps=steps, max_seconds=extras["max_seconds"],
                 batch_size=extras["batch_size"], seed=seed, trainer=trainer,
                 report=report if pipes is not None else None, scales=scales, sources=sources,
                 teacher_rows=teacher_rows, kto_rows=kto_rows, dpo_rows=dpo_rows, callbacks=callbacks,
                 prepare=references if kto or dpo else None)
    if not result.is_global_zero:
        return None
    _write(extras["checkpoint_uri"], recipe.checkpoint(module), storage)
    return {
        "tokens_trained": result.tokens,
        "final_loss": result.final_loss, "steps_done": result.steps, "train_seconds": result.seconds,
        "steps_per_second": result.steps / max(result.seconds, 1e-9), "stopped_by_time": result.stopped_by_time,
        "world_size": result.world_size, "parameters": sum(p.numel() for p in module.parameters()),
        "rows": row_count, "checkpoint": extras["checkpoint_uri"],
        **taught.get("report", {}),
        **{f"loss_{names[i]}": loss for i, loss in result.source_loss.items()},
        **by_mix,
        **{f"trainer_{k}": str(v) for k, v in trainer.items()},
    }


def ctrl_c_reaches_the_main_thread() -> None:
    """Ctrl-C stops the program even while its main thread waits in a system call (the warm start's or the
    dataset's read). Python runs a signal's handler only in the main thread, at its next bytecode: a SIGINT that
    another thread took (the kernel gives it to any that does not block it: torch's, polars') or that came just
    before the read began waited for a main thread that never came back (7 Ctrl-Cs of 105 under load). Python
    writes each signal it catches to a wakeup pipe; a thread reading it sends NUDGE to the main thread until SIGINT's
    handler has run there: the system call returns EINTR and KeyboardInterrupt is raised, as for any Ctrl-C."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started to ignore Ctrl-C: it still does
        return
    handled = threading.Event()
    main_thread = threading.get_ident()

    def interrupted(signum, frame):
        handled.set()
        signal.default_int_handler(signum, frame)

    def relay() -> None:
        while signal.SIGINT not in os.read(wakeup, 64):
            pass
        while not handled.is_set():
            signal.pthread_kill(main_thread, NUDGE)
            handled.wait(0.05)

    wakeup, written = os.pipe()
    os.set_blocking(written, False)
    signal.signal(NUDGE, lambda *_: None)
    signal.signal(signal.SIGINT, interrupted)
    signal.set_wakeup_fd(written, warn_on_full_buffer=False)
    threading.Thread(target=relay, name="ctrl-c relay", daemon=True).start()


def main() -> int:
    if not PipesEnvVarParamsLoader().is_dagster_pipes_process():
        print("the training program runs under Dagster Pipes: materialize candidate_model instead", file=sys.stderr)
        return 2
    ctrl_c_reaches_the_main_thread()
    if not is_global_zero():
        train(read_extras())
        return 0
    with open_dagster_pipes() as pipes:
        metrics = train(pipes.extras, pipes)
        pipes.report_asset_materialization(metadata=metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
