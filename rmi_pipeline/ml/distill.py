"""A model taught by another (its teacher, the champion): the teacher's labels on prompts it is reliable on (and,
where the recipe has a verifier, on the other slices' prompts it answers right), and its next-token distributions on
every answer token the student imitates (knowledge distillation, Hinton et al. 2015).

Both a new generation (a larger model trained from scratch) and a derivative (a smaller one for serving) learn so.
The distributions are the teacher's at temperature T, matched by KL(teacher || student) scaled by T^2 (so the
term's gradient keeps its size whatever T), computed on each batch by a forward of the frozen teacher: nothing is
stored per row. They need the two models to read the same tokens; where they do not, the student learns from the
teacher's labels only (`shared_vocabulary` says why).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

TAUGHT = "taught"  # the training mix's name for the teacher's labels


@dataclass
class Distillation:
    """What a student's training step reads to learn from its teacher. A plain attribute of the student, not a
    submodule: the teacher is never saved with the student's checkpoint nor seen by its optimizer."""

    teacher: torch.nn.Module  # `teacher(tokens)` gives logits over the student's vocabulary; frozen, eval mode
    temperature: float = 2.0
    weight: float = 0.5


def distill_term(logits: torch.Tensor, batch, distillation: Distillation) -> torch.Tensor:
    """Weight x T^2 x the mean KL(teacher_T || student_T) per answer token, summed over the rows the student imitates
    (scale > 0: not a thumbs-down, not a sampled answer pushed down) and divided by the batch size, as the loss's
    other terms are; `logits` predict tokens[:, 1:]."""
    tokens, mask = batch[0].long(), batch[1]
    taught = batch[2] > 0 if len(batch) > 2 else torch.ones(len(tokens), dtype=torch.bool, device=tokens.device)
    if not taught.any():
        return logits.new_zeros(())
    teacher = distillation.teacher
    if next(teacher.parameters()).device != logits.device:
        teacher.to(logits.device)
    with torch.no_grad():
        theirs = torch.log_softmax(teacher(tokens[taught][:, :-1]).float() / distillation.temperature, dim=-1)
    mine = torch.log_softmax(logits[taught].float() / distillation.temperature, dim=-1)
    where = mask[taught][:, 1:].float()
    kl = ((theirs.exp() * (theirs - mine)).sum(-1) * where).sum(1) / where.sum(1).clamp(min=1)
    return distillation.weight * distillation.temperature ** 2 * kl.sum() / len(tokens)


def shared_vocabulary(recipe, teacher, student, prompts: Sequence[str], completions: Sequence[str]) -> str | None:
    """None when the teacher's distributions can teach the student (the same rows encode to the same tokens, and
    both predict over the same vocabulary); else why not, in a sentence."""
    if not prompts:
        return None
    theirs, _ = recipe.encode(teacher, list(prompts), list(completions))
    mine, _ = recipe.encode(student, list(prompts), list(completions))
    if theirs.shape != mine.shape or not torch.equal(theirs.long(), mine.long()):
        return "the teacher's tokenizer splits the same text otherwise than the student's"
    with torch.no_grad():
        widths = [model(mine[:1].long()).shape[-1] for model in (teacher, student)]
    if widths[0] != widths[1]:
        return f"the teacher predicts over {widths[0]} tokens and the student over {widths[1]}"
    return None


def reliable_slices(scores: dict[str, float], saturation: float) -> list[str]:
    """The slices (skill/tier names) the teacher answers at least `saturation` right on the sealed eval: where its
    labels can stand in for the truth."""
    return sorted(name for name, score in scores.items() if score >= saturation)


def prompts_to_label(recipe, reliable: list[str], per_slice: int, seed: int,
                     asked: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Prompts for the teacher to label: `per_slice` fresh ones per reliable slice from the recipe's generator;
    without one, the distinct prompts of `asked` ((prompt, slice name) of the training rows) in reliable slices."""
    if recipe.has("generator"):
        rng, prompts = random.Random(seed), []
        for name in reliable:
            skill, _, tier = name.rpartition("/")
            if skill in recipe.skills and tier.isdigit():
                prompts += [t.prompt for t in recipe.sample_tasks(rng, per_slice, [skill], [int(tier)])]
        return list(dict.fromkeys(prompts))
    wanted = set(reliable)
    return list(dict.fromkeys(p for p, name in asked if name in wanted))


def teacher_labels(recipe, teacher, prompts: list[str], batch: int = 512) -> tuple[list[str], list[str]]:
    """(prompts, the teacher's greedy answers) for the answers that can be training targets."""
    kept_prompts, answers = [], []
    for start in range(0, len(prompts), batch):
        part = prompts[start:start + batch]
        for prompt, answer in zip(part, recipe.answer(teacher, part), strict=True):
            if recipe.is_valid_completion(answer):
                kept_prompts.append(prompt)
                answers.append(answer)
    return kept_prompts, answers


def checked(recipe, prompts: list[str], answers: list[str]) -> tuple[list[str], list[str]]:
    """The labels the recipe's verifier gives full reward: on a slice the teacher is not reliable on, its right
    answers still teach, its wrong ones never do."""
    kept = [(p, a) for p, a in zip(prompts, answers, strict=True) if recipe.verify(p, a)[0] >= 1.0]
    return [p for p, _ in kept], [a for _, a in kept]


def taught_weight(share: float, other_weights: torch.Tensor, rows: int) -> float:
    """The sampling weight of each of `rows` taught rows that makes them `share` of every batch beside rows of
    `other_weights`."""
    if rows == 0 or share <= 0:
        return 0.0
    if share >= 1 or float(other_weights.sum()) == 0:
        return 1.0
    return share / (1 - share) * float(other_weights.sum()) / rows
