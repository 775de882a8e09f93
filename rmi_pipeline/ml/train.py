"""Fit a LightningModule on weighted (tokens, loss_mask) rows (ml/rows.py), bounded by steps and by wall time.

Rows are drawn with replacement by weight, so a dataset can say "half of every batch from new
feedback" without copying rows. The time bound keeps a cycle short when the CPUs are shared.

Rows are drawn a pool of batches at a time and grouped within the pool by length in steps of BUCKET_TOKENS, so a
batch (cut to its longest row) computes little padding: which rows train is unchanged, only which share a step.
Rows of a growing curriculum differ a lot in length (in the arithmetic recipe a practice row at tier 60 has 186
tokens, a feedback row 12-30), and one long row makes its whole batch that long. Rows of one bucket keep the order
they were drawn in: batches sorted by exact length hold one tier each, which cost the first model 0.56 -> 0.32 on
the anchor. A step holds `batch_size` rows up to ROW_TOKENS long, fewer longer ones (as many as hold batch_size *
ROW_TOKENS tokens), so a step's cost is bounded however far the curriculum has climbed. The arithmetic recipe's
user rows (about 27 tokens) fill under half of that bound, so a step of long rows still costs up to about twice one
of theirs.

Under DDP `batch_size` stays the rows of one optimizer step: each of the N processes takes batch_size / N
rows, drawn by its own sampler seeded with (seed, rank). Lightning would instead wrap our
WeightedRandomSampler in a DistributedSamplerWrapper, which makes every rank draw the whole run's indices and
keep a strided share of them; drawing with replacement per rank gives the same distribution directly.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

from .rows import Rows, answer_ends


@dataclass
class FitResult:
    steps: int
    seconds: float
    final_loss: float  # mean over the last batches of every process
    stopped_by_time: bool
    world_size: int = 1
    source_loss: dict[int, float] = field(default_factory=dict)  # mean loss per row source over the whole fit
    is_global_zero: bool = True  # the one process that may write checkpoints and report
    tokens: int = 0  # the rows every process trained, each counted up to its last answer token


REPORT_STEPS = 200  # a long fit still says how it goes every few seconds (twenty reports of 100,000 steps: 5,000 apart)


class _Progress(L.Callback):
    """Reports (step, total, loss) about twenty times per fit, and at least every REPORT_STEPS steps, from the first
    process; the loss is the running mean of the last batches, averaged over all processes (every process reports
    at the same steps: a step count, not a clock, says when)."""

    def __init__(self, total: int, report: Callable[[int, int, float], None] | None, sources: int = 0):
        self.total, self.report, self.sources = total, report, sources
        self.source_sums, self.source_rows = torch.zeros(sources), torch.zeros(sources, dtype=torch.long)
        self.every = max(1, min(total // 20, REPORT_STEPS))
        self.recent: list[float] = []
        self.final_loss = float("nan")
        self.tokens = 0  # this process's rows trained, each counted up to its last answer token

    def _mean(self, trainer) -> float:
        local = torch.tensor(sum(self.recent) / max(1, len(self.recent)), device=trainer.strategy.root_device)
        return float(trainer.strategy.reduce(local, reduce_op="mean"))  # every rank calls it at the same step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.recent = (self.recent + [float(outputs["loss"])])[-50:]
        self.tokens += int(answer_ends(batch[1]).sum())
        if outputs.get("source") is not None:  # each source's rows: running sums of loss and count
            sums = torch.zeros(self.sources).index_add_(0, outputs["source"].cpu(), outputs["row_loss"].float().cpu())
            self.source_sums += sums
            self.source_rows += torch.bincount(outputs["source"].cpu(), minlength=self.sources)
        step = trainer.global_step
        if step % self.every == 0 or step == self.total:
            loss = self._mean(trainer)
            if self.report and trainer.is_global_zero:
                self.report(step, self.total, loss)

    def on_train_end(self, trainer, pl_module):
        self.final_loss = self._mean(trainer)
        local = torch.tensor(float(self.tokens), device=trainer.strategy.root_device)
        self.tokens = round(float(trainer.strategy.reduce(local, reduce_op="sum")))


POOL = 8  # batches drawn at once and grouped by row length
BUCKET_TOKENS = 32  # rows whose lengths differ by less share a bucket (arithmetic's user questions, 1-9 digits: one)
ROW_TOKENS = 2 * BUCKET_TOKENS  # a step holds at most batch_size rows of this length: longer rows, fewer a step


class _Batches(Dataset):
    """A batch at a time (the DataLoader's `__getitems__`): the rows' tokens and loss mask cut to the batch's longest
    row, then each per-row column (`columns`: (values or None: all `constant`, dtype, constant)) cast to its batch
    dtype: a column is kept in the smallest dtype that holds it (at 77M rows an int64 one is 0.6 GB)."""

    def __init__(self, rows: Rows, columns: list[tuple[torch.Tensor | None, torch.dtype, float]]):
        if any(values is not None and len(values) != len(rows) for values, _, _ in columns):
            raise ValueError("every per-row column needs one value per row")
        self.rows, self.columns = rows, columns

    def __len__(self) -> int:
        return len(self.rows)

    def __getitems__(self, at: list[int]) -> list[torch.Tensor]:
        at = torch.tensor(at, dtype=torch.long)
        return [*self.rows.batch(at), *(torch.full((len(at),), constant, dtype=dtype) if values is None
                                        else values[at].to(dtype) for values, dtype, constant in self.columns)]


def _whole(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    return batch  # _Batches made it whole


class _WeightedRows(L.LightningDataModule):
    """Each process draws its own share of every batch, with replacement by weight, seeded by (seed, rank)."""

    def __init__(self, rows: _Batches, weights: torch.Tensor, lengths: torch.Tensor, steps: int,
                 batch_size: int, seed: int, prepare: Callable[[torch.Tensor], None] | None = None):
        super().__init__()
        self.rows, self.weights, self.lengths = rows, weights, lengths
        self.steps, self.batch_size, self.seed, self.prepare = steps, batch_size, seed, prepare

    def train_dataloader(self) -> DataLoader:
        world, rank = self.trainer.world_size, self.trainer.global_rank
        if self.batch_size % world:
            raise ValueError(f"batch size {self.batch_size} does not split evenly over {world} processes")
        share = self.batch_size // world
        batches = _LengthBatches(self.weights, self.lengths, self.steps, share, self.seed, rank)
        if self.prepare is not None:  # once, before the first step: the draws are fixed by the seed
            self.prepare(torch.tensor([row for rows in batches for row in rows], dtype=torch.long))
            self.prepare = None
        return DataLoader(self.rows, batch_sampler=batches, collate_fn=_whole)


class _LengthBatches(torch.utils.data.Sampler):
    """`steps` batches of rows drawn by weight (rank_sampler), POOL batches at a time grouped by length bucket
    (stable: within a bucket, in the order drawn)."""

    def __init__(self, weights: torch.Tensor, lengths: torch.Tensor, steps: int, batch: int, seed: int, rank: int):
        self.weights, self.seed, self.rank = weights, seed, rank
        self.buckets, self.steps, self.batch = (lengths - 1) // BUCKET_TOKENS, steps, batch

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        made, draw = 0, 0
        while True:  # rows longer than ROW_TOKENS make more batches of a pool: then more pools are drawn
            drawn = torch.tensor(list(rank_sampler(self.weights, self.steps * self.batch, self.seed + draw,
                                                   self.rank)), dtype=torch.long)
            for start in range(0, len(drawn), POOL * self.batch):
                pool = drawn[start:start + POOL * self.batch]
                for rows in self._cut(pool[torch.argsort(self.buckets[pool], stable=True)].tolist()):
                    yield rows
                    made += 1
                    if made == self.steps:
                        return
            draw += 1

    def _cut(self, rows: list[int]):
        """Rows sorted by bucket, in batches of `batch` rows or of as many as hold batch * ROW_TOKENS tokens."""
        budget, batch = self.batch * ROW_TOKENS, []
        for row in rows:
            if len(batch) == self.batch or (len(batch) + 1) * (int(self.buckets[row]) + 1) * BUCKET_TOKENS > budget:
                if batch:
                    yield batch
                batch = []
            batch.append(row)
        if batch:
            yield batch


MULTINOMIAL_ROWS = 2**24  # the most categories torch.multinomial (under WeightedRandomSampler) draws from


def rank_sampler(weights: torch.Tensor, rows: int, seed: int, rank: int):
    """The rows one process trains on: drawn with replacement by weight, seeded by (seed, rank), so each process
    of a DDP run draws its own share and rank 0 draws what a single process would. Past 2^24 rows (a 100M-event
    history) torch.multinomial refuses: rows are then drawn by inverting the weights' cumulative sum."""
    generator = torch.Generator().manual_seed(seed + 1_000_003 * rank)
    if len(weights) <= MULTINOMIAL_ROWS:
        return WeightedRandomSampler(weights, num_samples=rows, replacement=True, generator=generator)
    cumulative = weights.double().cumsum(0)
    drawn = torch.rand(rows, generator=generator, dtype=torch.float64) * cumulative[-1]
    return torch.searchsorted(cumulative, drawn, right=True).clamp(max=len(weights) - 1).tolist()


def fit(
    module: L.LightningModule,
    tokens: Rows | torch.Tensor,
    loss_mask: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    *,
    max_steps: int,
    max_seconds: float,
    batch_size: int = 64,
    seed: int = 0,
    trainer: dict | None = None,
    loggers: list | None = None,
    report: Callable[[int, int, float], None] | None = None,
    scales: torch.Tensor | None = None,
    sources: torch.Tensor | None = None,
    teacher_rows: torch.Tensor | None = None,
    kto_rows: torch.Tensor | None = None,
    dpo_rows: torch.Tensor | None = None,
    callbacks: list | None = None,
    prepare: Callable[[torch.Tensor], None] | None = None,
) -> FitResult:
    """`tokens`: the rows (ml/rows.py), or a 2-D tokens tensor and its `loss_mask` (recipe.encode's pair); `scales`
    multiply each row's loss (RL advantages); `sources` (row source ids) get their loss followed; `teacher_rows` index
    the module's `teacher` distributions, `kto_rows` its `kto` reference, `dpo_rows` its `dpo` reference (-1: none;
    ml/objective.py); `callbacks`: more Lightning callbacks (a bench's evaluations); `prepare` is called in each
    process before its first step, with the module on its device, with every row that process will draw (repeats
    included): references computed then for those rows only, and written into the index columns given here."""
    rows = tokens if isinstance(tokens, Rows) else Rows.of(tokens, loss_mask)
    if len(rows) == 0:
        raise ValueError("cannot train on an empty dataset")
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="lightning")
    L.seed_everything(seed, workers=True, verbose=False)
    weights = torch.ones(len(rows)) if weights is None else weights.double()
    columns = []  # after tokens and mask: (values, batch dtype, constant where not given)
    indexed = [teacher_rows, kto_rows, dpo_rows]  # columns 4 on: a row's index into the module's references
    if scales is not None or sources is not None or any(i is not None for i in indexed):
        columns += [(scales, torch.float32, 1.0), (sources, torch.long, 0)]
    while indexed and indexed[-1] is None:  # a column only up to the last one given
        indexed.pop()
    columns += [(index, torch.long, -1) for index in indexed]
    data = _WeightedRows(_Batches(rows, columns), weights, rows.lengths, max_steps, batch_size, seed,
                         prepare)
    progress = _Progress(max_steps, report, int(sources.max()) + 1 if sources is not None else int(bool(columns)))
    trainer = L.Trainer(
        max_steps=max_steps,
        max_time=timedelta(seconds=max_seconds),
        **{"accelerator": "auto", "devices": 1, **(trainer or {})},
        use_distributed_sampler=False,  # _WeightedRows shards by rank itself
        logger=loggers or False,
        callbacks=[progress, *(callbacks or [])],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=max(1, max_steps // 50),
    )
    started = time.perf_counter()
    trainer.fit(module, datamodule=data)
    steps = trainer.global_step
    return FitResult(
        steps=steps,
        seconds=time.perf_counter() - started,
        final_loss=progress.final_loss,
        stopped_by_time=steps < max_steps,
        world_size=trainer.world_size,
        is_global_zero=trainer.is_global_zero,
        tokens=progress.tokens,
        source_loss={i: float(progress.source_sums[i] / n) for i, n in enumerate(progress.source_rows.tolist()) if n},
    )
