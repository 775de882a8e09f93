"""A reward model from users' ratings: a head on the champion's backbone that reads P(thumbs-up | prompt, answer).

It is measured on ratings it never saw (their prompts held out by hash): Brier score against the base rate's (the
forecast that knows nothing but how often users say up), and a reliability curve. Where it beats the base rate, it
ranks the champion's sampled answers to recent prompts, and the best become training rows (best_of_n). It never
gates a promotion: a learned reward is what a model learns to fool (the sealed eval and the judge gate).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import lightning as L
import torch
import torch.nn.functional as F

from .objective import adamw_warmup_cosine

Z_ONE_SIDED_95 = 1.645  # the reward model beats the base rate only where chance would rarely give its edge
BINS = 10  # of the reliability curve


class RewardModel(L.LightningModule):
    """The backbone of a trainable module (the recipe's `load_checkpoint`) with a linear head read at each row's
    last answer token; the head starts at the base rate, so an untrained model forecasts what the base rate does."""

    def __init__(self, recipe, backbone, width: int, base_rate: float, learning_rate: float, max_steps: int):
        super().__init__()
        self.recipe, self.backbone = recipe, backbone
        self.head = torch.nn.Linear(width, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.constant_(self.head.bias, _logit(base_rate))
        self.learning_rate, self.max_steps = learning_rate, max_steps

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The logit of a thumbs-up, per row."""
        hidden = self.recipe.hidden_states(self.backbone, tokens.long())
        return self.head(hidden[torch.arange(len(mask)), last_answer_token(mask)].float()).squeeze(-1)

    def training_step(self, batch, batch_idx):
        tokens, mask, up = batch
        loss = F.binary_cross_entropy_with_logits(self(tokens, mask), up.float())
        self.log("reward_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return adamw_warmup_cosine(self.parameters(), self.learning_rate, max(1, self.max_steps // 10),
                                   self.max_steps)


def last_answer_token(mask: torch.Tensor) -> torch.Tensor:
    """Each row's last loss-masked position: the answer's end token, which has read the prompt and the answer."""
    return mask.shape[1] - 1 - mask.flip(1).float().argmax(1)


def train_reward_model(recipe, backbone, prompts: Sequence[str], answers: Sequence[str], up: Sequence[bool], *,
                       steps: int, batch_size: int, learning_rate: float, seed: int) -> RewardModel:
    """A reward model fitted on rated answers (`up`: the thumbs) by binary cross-entropy, with a real Lightning
    Trainer on this process's device."""
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(seed)
    tokens, mask = recipe.encode(backbone, list(prompts), list(answers))
    labels = torch.tensor([bool(u) for u in up])
    with torch.no_grad():
        width = recipe.hidden_states(backbone, tokens[:1].long()).shape[-1]
    model = RewardModel(recipe, backbone, width, float(labels.float().mean()), learning_rate, steps)
    model.train()
    loader = DataLoader(TensorDataset(tokens, mask, labels), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed), drop_last=len(labels) > batch_size)
    trainer = L.Trainer(max_steps=steps, accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, loader)
    return model.eval()


def dumps(model: RewardModel) -> bytes:
    """The reward model as checkpoint bytes (its backbone's and head's weights; no pickled code)."""
    from . import checkpoint

    return checkpoint.dumps({"kind": "reward_model"}, model.state_dict())


def loads(recipe, backbone, data: bytes) -> RewardModel:
    """The reward model `dumps` wrote, on a backbone of the same champion (the recipe's `load_checkpoint`)."""
    from . import checkpoint

    _, state = checkpoint.loads(data)
    model = RewardModel(recipe, backbone, state["head.weight"].shape[1], 0.5, 0.0, 1)
    model.load_state_dict(state)
    return model.eval()


def scores(model: RewardModel, prompts: Sequence[str], answers: Sequence[str], batch: int = 256) -> list[float]:
    """P(thumbs-up) of each (prompt, answer)."""
    out: list[float] = []
    device = next(model.parameters()).device
    with torch.no_grad():
        for start in range(0, len(prompts), batch):
            tokens, mask = model.recipe.encode(model.backbone, list(prompts[start:start + batch]),
                                               list(answers[start:start + batch]))
            out += torch.sigmoid(model(tokens.to(device), mask.to(device))).tolist()
    return out


@dataclass(frozen=True)
class Bin:
    """Held-out answers whose forecast fell in [low, high): how many, their mean forecast, the share rated up."""

    low: float
    high: float
    answers: int
    forecast: float
    observed: float


@dataclass(frozen=True)
class Calibration:
    """How well the forecasts match ratings they never saw, against the base rate's forecast."""

    ratings: int  # held-out rated answers measured on
    base_rate: float  # thumbs-up share of the training ratings: the forecast that knows nothing
    brier: float
    base_brier: float
    edge_upper: float  # upper end of the one-sided 95% interval of brier - base_brier, per answer
    forecast_up: float  # the thumbs-up share the model predicted on them
    observed_up: float  # and the share users gave
    bins: tuple[Bin, ...]

    @property
    def skill(self) -> float:
        """1 - brier / base_brier: above 0, better than the base rate."""
        return 1 - self.brier / self.base_brier if self.base_brier else 0.0

    @property
    def beats_base_rate(self) -> bool:
        """Its Brier score is below the base rate's beyond chance (one-sided 95%, paired by answer)."""
        return self.edge_upper < 0

    def curve(self) -> str:
        """The reliability curve as a Markdown table, for the UI."""
        rows = [f"| {b.low:.1f}-{b.high:.1f} | {b.answers} | {b.forecast:.2f} | {b.observed:.2f} |" for b in self.bins]
        return "\n".join(["| forecast | answers | mean forecast | rated up |", "|---|---|---|---|", *rows])


def calibration(forecasts: Sequence[float], up: Sequence[bool], base_rate: float, bins: int = BINS) -> Calibration:
    """The forecasts' Brier score on held-out ratings against the base rate's, and their reliability curve."""
    n = len(forecasts)
    if not n:
        raise ValueError("calibration needs held-out ratings")
    y = [float(u) for u in up]
    edge = [(p - t) ** 2 - (base_rate - t) ** 2 for p, t in zip(forecasts, y, strict=True)]
    mean = sum(edge) / n
    sd = math.sqrt(sum((e - mean) ** 2 for e in edge) / max(1, n - 1))
    width = 1 / bins
    curve = []
    for i in range(bins):
        inside = [(p, t) for p, t in zip(forecasts, y, strict=True)
                  if i * width <= p < (i + 1) * width or (i == bins - 1 and p == 1.0)]
        if inside:
            curve.append(Bin(round(i * width, 2), round((i + 1) * width, 2), len(inside),
                             sum(p for p, _ in inside) / len(inside), sum(t for _, t in inside) / len(inside)))
    brier = sum((p - t) ** 2 for p, t in zip(forecasts, y, strict=True)) / n
    return Calibration(n, base_rate, brier, sum((base_rate - t) ** 2 for t in y) / n,
                       mean + Z_ONE_SIDED_95 * sd / math.sqrt(n), sum(forecasts) / n, sum(y) / n, tuple(curve))


@dataclass
class Picked:
    rows: list[dict]  # {"prompt", "target", "source": "best_of_n"}
    meta: dict


def best_of_n(recipe, policy, score: Callable[[list[str], list[str]], list[float]], prompts: list[str], n: int,
              temperature: float, seed: int, min_score: float) -> Picked:
    """For each prompt, the champion's greedy answer and `n` samples; the one the reward model scores highest
    becomes a row where its P(thumbs-up) reaches `min_score`."""
    greedy = recipe.answer(policy, prompts)
    groups = recipe.sample(policy, prompts, n, temperature, seed)
    flat = [(i, a) for i, (g, group) in enumerate(zip(greedy, groups, strict=True))
            for a in dict.fromkeys([g, *group]) if recipe.is_valid_completion(a)]
    scored = score([prompts[i] for i, _ in flat], [a for _, a in flat]) if flat else []
    best: dict[int, tuple[float, str]] = {}
    for (i, answer), s in zip(flat, scored, strict=True):
        if i not in best or s > best[i][0]:
            best[i] = (s, answer)
    kept = {i: (s, a) for i, (s, a) in best.items() if s >= min_score}
    rows = [{"prompt": prompts[i], "target": a, "source": "best_of_n"} for i, (_, a) in sorted(kept.items())]
    return Picked(rows, {
        "best_of_n_prompts": len(prompts), "best_of_n_candidates": len(flat), "best_of_n_rows": len(rows),
        "best_of_n_not_greedy": sum(a != greedy[i] for i, (_, a) in kept.items()),
        "best_of_n_mean_best_score": round(sum(s for s, _ in best.values()) / max(1, len(best)), 4)})


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))
