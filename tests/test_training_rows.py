"""Training rows stored ragged (ml/rows.py): a batch of them is the batch of rows padded to the widest, cut to its own
longest row; the training program reads a dataset into them a row group at a time, on files nothing is left of once
it ends; and a fit on them trains exactly as on padded rows."""

import gc
import os
import random
import tempfile

import polars as pl
import pyarrow.parquet as pq
import pytest
import torch

from rmi_pipeline.ml import train as training
from rmi_pipeline.ml.objective import trimmed
from rmi_pipeline.ml.rows import RowFiles, Rows, answer_ends
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe
from rmi_pipeline.settings import DEFAULT_RECIPE, Training

R = ArithmeticRecipe()


def padded(blocks: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks of rows of different widths right-padded to the widest and stacked: the rows as they were kept."""
    width = max(t.shape[1] for t, _ in blocks)
    return tuple(torch.cat([torch.nn.functional.pad(b[i], (0, width - b[i].shape[1])) for b in blocks])
                 for i in (0, 1))


def cut(tokens: torch.Tensor, mask: torch.Tensor, at) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded rows `at` as a ragged batch must give them: cut to their longest answer end (`trimmed`), and nothing
    after each row's own last answer token."""
    tokens, mask = trimmed([tokens[at], mask[at]])
    beyond = torch.arange(tokens.shape[1]) >= answer_ends(mask)[:, None]
    return tokens.masked_fill(beyond, 0), mask


def blocks_of_rows(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Blocks of 2-D (tokens, loss mask) rows of different widths, each padded with PAD: every row has an answer
    span; among them rows of one token (an answer at 0) and one row as wide as the widest block."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for rows, width in ((40, 7), (25, 31), (60, 3), (10, 19)):
        tokens = torch.randint(1, 14, (rows, width), generator=g, dtype=torch.uint8)
        end = torch.randint(1, width + 1, (rows,), generator=g)
        end[:3] = torch.tensor([1, width, width])
        start = (end - 1 - torch.randint(0, 4, (rows,), generator=g)).clamp(min=0)
        start[0] = 0
        place = torch.arange(width)
        tokens[place >= end[:, None]] = 13  # PAD
        out.append((tokens, (place >= start[:, None]) & (place < end[:, None])))
    return out


@pytest.mark.parametrize("stored", ["files", "2-D"])
def test_a_batch_of_ragged_rows_is_the_padded_batch_cut_to_its_longest_row(stored):
    blocks = blocks_of_rows(0)
    tokens, mask = padded(blocks)
    if stored == "files":
        files = RowFiles()
        for block in blocks:
            files.append(*block)
        rows = files.rows()
    else:
        rows = Rows.of(tokens, mask)
    lengths = answer_ends(mask)
    assert len(rows) == len(tokens) and rows.lengths.tolist() == lengths.tolist()
    assert (lengths == 1).sum() >= 4 and lengths.max() == tokens.shape[1]
    rng = random.Random(0)
    ones, longest = (lengths == 1).nonzero().squeeze(1).tolist(), int(lengths.argmax())
    for at in [[longest], ones[:2], [ones[0], longest, ones[1]], *(rng.choices(range(len(tokens)), k=16)
                                                                  for _ in range(20))]:
        batch = rows.batch(at)
        assert batch[0].dtype == torch.uint8 and batch[1].dtype == torch.bool
        assert all(torch.equal(a, b) for a, b in zip(batch, cut(tokens, mask, at), strict=True)), at

    # RL's cut of some rows to their first answer token: a row then ends there, in its batches and its length
    wrong = [longest, 5, 47, 48, 80]
    _, was = rows.batch(wrong)
    kept = was & (torch.arange(was.shape[1]) == was.float().argmax(1)[:, None])
    rows.set_mask(wrong, kept)
    mask[wrong] = torch.nn.functional.pad(kept, (0, mask.shape[1] - kept.shape[1]))
    assert rows.lengths.tolist() == answer_ends(mask).tolist() and rows.lengths[longest] < tokens.shape[1]
    for at in [wrong, list(range(len(tokens)))]:
        assert all(torch.equal(a, b) for a, b in zip(rows.batch(at), cut(tokens, mask, at), strict=True))


def write_row_groups(path, groups: list[pl.DataFrame]) -> None:
    writer = None
    for frame in groups:
        table = frame.to_arrow()
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


def dataset_groups(seed: int) -> list[pl.DataFrame]:
    """Row groups as the dataset asset writes them, each of other widths: user sums of a few digits, practice sums
    of 30, and wrong RL answers with the right one as their reference."""
    rng = random.Random(seed)

    def group(mix, tiers, n, wrong=False):
        tasks = R.sample_tasks(rng, n, ["add", "sub"], tiers)
        return pl.DataFrame({
            "prompt": [t.prompt for t in tasks],
            "target": [str(int(t.answer) + rng.randint(1, 9)) if wrong else t.answer for t in tasks],
            "mix": mix, "scale": -0.5 if wrong else 1.0, "reference": [t.answer if wrong else None for t in tasks],
            "teacher": None, "rejected": None, "skill": [t.skill for t in tasks], "tier": [t.tier for t in tasks]},
            schema_overrides={"reference": pl.String, "teacher": pl.String, "rejected": pl.String})

    return [group("feedback", [1, 2], 90), group("practice", [30], 12), group("rl", [3, 4], 30, wrong=True),
            group("replay", [1], 50)]


def test_the_program_reads_each_row_group_into_the_rows_the_padded_rows_were_cut_per_row(tmp_path):
    from rmi_pipeline.training.program import _rows

    groups = dataset_groups(0)
    write_row_groups(tmp_path / "rows.parquet", groups)
    module = R.build_model(3e-3, 1)
    data, texts, files = _rows(R, module, str(tmp_path / "rows.parquet"), {})
    rows = files.rows()
    tokens, mask = padded([R.encode(module, g["prompt"], g["target"]) for g in groups])
    assert len({R.encode(module, g["prompt"], g["target"])[0].shape[1] for g in groups}) == len(groups)
    assert len(rows) == len(data) == len(tokens) == sum(len(g) for g in groups)
    every = list(range(len(tokens)))
    assert all(torch.equal(a, b) for a, b in zip(rows.batch(every), cut(tokens, mask, every), strict=True))
    # every row keeps what training reads of it, compactly; only the RL rows keep their text, and their row number
    assert dict(data.schema) == {"mix": pl.Categorical, "scale": pl.Float32, "skill": pl.Categorical, "tier": pl.Int32}
    assert data["mix"].to_list() == pl.concat(groups)["mix"].to_list()
    assert texts["index"].to_list() == list(range(102, 132))
    assert texts["prompt"].to_list() == groups[2]["prompt"].to_list()


def extras(tmp_path, mix_weights: dict) -> dict:
    return {"recipe": DEFAULT_RECIPE, "dataset_uri": str(tmp_path / "rows.parquet"), "storage_options": {},
            "warm_start_uri": None, "checkpoint_uri": str(tmp_path / "candidate.ckpt"), "mix_weights": mix_weights,
            "model_size": "micro", "steps": 5, "max_seconds": 60, "seed": 0, "batch_size": 16, "learning_rate": 3e-3,
            "trainer": {**Training().hardware(), "accelerator": "cpu"}}


def test_nothing_is_left_of_the_row_files_once_the_program_ends_even_by_an_error(tmp_path, monkeypatch):
    from rmi_pipeline.training.program import train

    write_row_groups(tmp_path / "rows.parquet", dataset_groups(1))
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))

    def left() -> list[str]:
        """The files in the folder, and those of it this process still has open or mapped."""
        gc.collect()
        opened = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{fd}")]
        with open("/proc/self/maps") as maps:
            mapped = [" ".join(line.split()[5:]) for line in maps]
        return [*os.listdir(folder), *(p for p in [*opened, *mapped] if p.startswith(str(folder)))]

    weights = {"feedback": 0.01, "practice": 0.01, "rl": 0.01, "replay": 0.01}
    metrics = train(extras(tmp_path, weights))
    assert metrics["steps_done"] == 5 and metrics["rows"] == 182
    assert left() == []
    with pytest.raises(KeyError, match="replay"):  # the rows were written and mapped: a mix without a weight fails
        train(extras(tmp_path, {m: w for m, w in weights.items() if m != "replay"}))
    assert left() == []


def test_a_fit_on_ragged_rows_trains_exactly_as_on_the_rows_padded_to_the_widest(monkeypatch):
    """The same seed and rows draw the same batches, which the model reads alike: the same loss to the last digit
    and the same weights as a fit whose batches are plain rows of the padded 2-D tensors."""
    rng = random.Random(0)
    tasks = R.sample_tasks(rng, 200, ["add", "sub"], [1, 2, 3]) + R.sample_tasks(rng, 12, ["add"], [25])
    tokens, mask = R.encode(None, [t.prompt for t in tasks], [t.answer for t in tasks])
    weights = torch.rand(len(tokens), generator=torch.Generator().manual_seed(1)).double()
    scales, sources = torch.linspace(-1, 2, len(tokens)).double(), torch.arange(len(tokens)) % 3

    def fitted():
        torch.manual_seed(0)
        module = R.build_model(3e-3, 20, size="micro")
        result = training.fit(module, tokens, mask, weights, max_steps=20, max_seconds=120, batch_size=16, seed=3,
                              trainer={"accelerator": "cpu"}, scales=scales, sources=sources)
        return result, [p.detach().clone() for p in module.parameters()]

    ragged, ragged_weights = fitted()
    ragged_batch = training._Batches.__getitems__

    def plain(self, at):  # whole rows of the padded tensors, as a TensorDataset gave them
        return [tokens[torch.tensor(at)], mask[torch.tensor(at)], *ragged_batch(self, at)[2:]]

    monkeypatch.setattr(training._Batches, "__getitems__", plain)
    reference, reference_weights = fitted()
    assert ragged.steps == reference.steps == 20
    assert ragged.final_loss == reference.final_loss and ragged.tokens == reference.tokens
    assert ragged.source_loss == reference.source_loss
    assert all(torch.equal(a, b) for a, b in zip(ragged_weights, reference_weights, strict=True))
