"""Reinforcement from the recipe's verifier, and a coach's hints for the failures.

Rollouts: k sampled answers per prompt, each rewarded by the verifier; an answer's advantage is its reward
against its group's mean, in units of the group's spread (group-relative policy gradient). A group whose answers
all score alike teaches nothing and is dropped. Training then scales each sampled answer's loss by its advantage.
A wrong answer is pushed down only at its first mistake, the token where it leaves a right answer of its group,
with the weight one token of a right answer gets: the tokens before are right (in arithmetic, a wrong sum is
mostly right digits), those after follow from the mistake, and pushing whole wrong answers down cost the anchor
up to 0.13 in bench/ablation.py.

Coaching: a failed first attempt gets the verifier's critique back as a hint for a second attempt (the recipe
decides what a hint is: words in the prompt, or a decoding constraint); a hinted success becomes a plain (prompt,
answer) row, so the model learns to do unaided what it did with help (distillation). Where the hint is words, the
row also keeps the hinted prompt, so it can instead teach token by token (RMI_PRACTICE_HINT_DISTILLATION,
ml/objective.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Rollouts:
    rows: list[dict] = field(default_factory=list)  # {"prompt", "target", "scale", "reference"}
    prompts: int = 0
    samples: int = 0
    solved_share: float = 0.0  # share of sampled answers the verifier accepted
    informative_groups: int = 0


def rollouts(recipe, prompts: list[str], groups: list[list[str]]) -> Rollouts:
    """RL rows from a group of sampled answers per prompt (recipe.sample), each rewarded by the verifier."""
    out = Rollouts(prompts=len(prompts))
    if not prompts:
        return out
    solved, k = 0, len(groups[0])
    for prompt, group in zip(prompts, groups, strict=True):
        rewards = [recipe.verify(prompt, answer)[0] for answer in group]
        solved += sum(r == 1 for r in rewards)
        mean = sum(rewards) / k
        spread = (sum((r - mean) ** 2 for r in rewards) / k) ** 0.5
        if spread < 1e-6:
            continue
        out.informative_groups += 1
        best = group[rewards.index(max(rewards))]
        for answer, reward in zip(group, rewards, strict=True):
            if recipe.is_valid_completion(answer):  # an answer the model cannot be trained on teaches nothing
                out.rows.append({"prompt": prompt, "target": answer, "scale": (reward - mean) / spread,
                                 "reference": best if reward < mean else None})
    out.samples = k * len(prompts)
    out.solved_share = solved / out.samples
    return out


def first_mistake(tokens: torch.Tensor, mask: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The loss mask of wrong sampled answers cut to the one answer token where each leaves its `reference`
    (rows of any widths: a shorter one is padded with a token id no row holds)."""
    width = tokens.shape[1]
    reference = torch.nn.functional.pad(reference.long(), (0, max(0, width - reference.shape[1])), value=-1)
    differs = (tokens.long() != reference[:, :width]) & mask
    first = torch.where(differs.any(1), differs.float().argmax(1), torch.full((len(tokens),), -1))
    return mask & (torch.arange(tokens.shape[1]) == first.unsqueeze(1))


@dataclass
class Coaching:
    # hinted successes: {"prompt", "target"} without the hint, and "teacher": the hinted prompt where it is text
    rows: list[dict] = field(default_factory=list)
    failed: int = 0  # prompts whose first (greedy) attempt failed
    hinted: int = 0  # of those, the ones whose critique held a usable hint
    solved_with_hint: int = 0
    solved_without_hint: int = 0  # a second sampled attempt with no hint, the baseline
    failed_prompts: list[str] = field(default_factory=list)


def coach(recipe, model, prompts: list[str], temperature: float, seed: int) -> Coaching:
    out = Coaching()
    firsts = recipe.answer(model, prompts)
    failures = [(p, a, recipe.verify(p, a)) for p, a in zip(prompts, firsts, strict=True)]
    failures = [(p, a, critique) for p, a, (reward, critique) in failures if reward < 1]
    if not failures:
        return out
    out.failed = len(failures)
    out.failed_prompts = [p for p, _, _ in failures]
    seconds = recipe.hinted_answer(model, out.failed_prompts, [a for _, a, _ in failures], [c for _, _, c in failures])
    retries = [group[0] for group in recipe.sample(model, out.failed_prompts, 1, temperature, seed)]
    for (prompt, _, critique), second, retry in zip(failures, seconds, retries, strict=True):
        out.solved_without_hint += recipe.verify(prompt, retry)[0] == 1
        if second is None:
            continue
        out.hinted += 1
        if recipe.verify(prompt, second)[0] == 1:
            out.solved_with_hint += 1
            out.rows.append({"prompt": prompt, "target": second, "teacher": recipe.hint(prompt, critique)})
    return out
