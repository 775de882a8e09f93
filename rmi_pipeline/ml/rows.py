"""Training rows stored ragged: each row only up to its last answer token, the rows end to end.

A row matters only up to its last answer token (causal attention, no loss beyond), and rows differ a lot in length
(a user's sum about 27 tokens, a practice sum up to 186): padded to the widest, a few long rows make every row that
wide. A batch is gathered right-padded to its own longest row. A dataset larger than memory is written a block at a
time to files (RowFiles) and read through a mapping: only the pages that batches read come into memory.
"""

from __future__ import annotations

import tempfile

import numpy as np
import torch


def answer_ends(loss_mask: torch.Tensor) -> torch.Tensor:
    """Each row's length up to its last answer token (a row with none: the whole width), a million rows at a time:
    a float copy of a 10M-row mask is a gigabyte."""
    width = loss_mask.shape[1]
    return torch.cat([width - part.flip(1).to(torch.uint8).argmax(1) for part in loss_mask.split(1 << 20)])


class Rows:
    """Rows as one flat array of tokens and one of loss mask: row i is `lengths[i]` long from `starts[i]`."""

    def __init__(self, tokens: torch.Tensor, mask: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor):
        self.tokens, self.mask, self.starts, self.lengths = tokens, mask, starts, lengths

    @classmethod
    def of(cls, tokens: torch.Tensor, mask: torch.Tensor) -> Rows:
        """A 2-D (tokens, loss mask) pair, as recipe.encode makes it, read as rows without a copy: row i starts i
        widths in."""
        width = tokens.shape[1]
        return cls(tokens.reshape(-1), mask.reshape(-1), torch.arange(len(tokens)) * width, answer_ends(mask).int())

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, at) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows `at` as 2-D (tokens, loss mask), right-padded to the longest of them with token 0 and no loss."""
        at = torch.as_tensor(at, dtype=torch.long)
        lengths = self.lengths[at].long()
        place = torch.arange(int(lengths.max()) if len(at) else 0)
        inside = place < lengths[:, None]
        where = torch.where(inside, self.starts[at][:, None] + place, 0)
        return self.tokens[where].masked_fill(~inside, 0), self.mask[where] & inside

    def set_mask(self, at, mask: torch.Tensor) -> None:
        """Rows `at` take the 2-D loss mask `mask` within their lengths (RL's cut to a wrong answer's first mistake
        only removes answer tokens); each then ends at its last answer token (one with none keeps its length)."""
        at = torch.as_tensor(at, dtype=torch.long)
        lengths = self.lengths[at].long()
        inside = torch.arange(mask.shape[1]) < lengths[:, None]
        if (mask & ~inside).any():
            raise ValueError("a loss mask reaches past its row's last token")
        self.mask[(self.starts[at][:, None] + torch.arange(mask.shape[1]))[inside]] = mask[inside]
        self.lengths[at] = torch.where(mask.any(1), answer_ends(mask), lengths).to(self.lengths.dtype)


class RowFiles:
    """Rows appended a block at a time to unnamed temporary files (in tempfile's folder: TMPDIR), then mapped as Rows.

    Appends are plain writes: pages written through a mapping would count as the process's own memory. An unnamed
    file is gone once the process closes it, however it ends (an error, SIGTERM, SIGKILL)."""

    def __init__(self):
        self.dtypes = {"tokens": None, "mask": torch.bool, "starts": torch.int64, "lengths": torch.int32}
        self.files = {name: tempfile.TemporaryFile(prefix="rmi-rows-") for name in self.dtypes}
        self.total = 0  # tokens appended

    def append(self, tokens: torch.Tensor, mask: torch.Tensor) -> None:
        """The rows of a 2-D (tokens, loss mask) block, as recipe.encode makes it, each cut at its last answer token;
        tokens keep the first block's dtype."""
        self.dtypes["tokens"] = self.dtypes["tokens"] or tokens.dtype
        lengths = answer_ends(mask)
        inside = torch.arange(tokens.shape[1]) < lengths[:, None]
        for name, values in {"tokens": tokens[inside], "mask": mask[inside],
                             "starts": self.total + lengths.cumsum(0) - lengths, "lengths": lengths}.items():
            self.files[name].write(values.to(self.dtypes[name]).numpy())
        self.total += int(lengths.sum())

    def rows(self) -> Rows:
        """The rows appended, mapped copy-on-write (a mask set later changes this process's view only). The files
        close: their space lasts as long as the mapping, and nothing more can be appended."""
        parts = {}
        for name, dtype in self.dtypes.items():
            kind, file = torch.empty(0, dtype=dtype or torch.uint8).numpy().dtype, self.files[name]
            file.flush()
            size = file.tell() // kind.itemsize
            parts[name] = torch.from_numpy(np.memmap(file, kind, "c", shape=(size,)) if size else np.zeros(0, kind))
            file.close()
        return Rows(**parts)
