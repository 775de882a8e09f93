"""The default recipe: a 0.1M-parameter transformer that learns multi-digit addition and subtraction."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..base import Recipe, Task
from . import problems, tokens

SEED_TIERS = (1, 2, 3)
SEED_PER_SKILL = 2000
MAX_OFFSET = 8  # place ids seen in training reach WIDTH + MAX_OFFSET


class ArithmeticRecipe(Recipe):
    name = "arithmetic"
    skills = problems.SKILLS
    tiers = tuple(range(1, problems.WIDTH + 1))
    # "tiny" (0.1M parameters) trains in seconds on a CPU; "gpu" (85M) is for an accelerator. "tiny-places" puts
    # positions by place value, shifted at random in training: taught up to 3 digits it answers 4-6 digit sums
    # partly right (absolute positions: never), which is what lets a model label harder problems for itself. Its
    # attention is biased toward nearby places: without that it stayed on its early loss plateau in about half of
    # the trainings (3,000 steps: 4 of 7 stuck; with it 0 of 3).
    places = {"place_ids": tokens.PLACE_IDS[:-1], "segments": tokens.SEGMENTS[:-1], "max_offset": MAX_OFFSET,
              "attention_places": tokens.PLACE_IDS[:-1]}
    sizes = {"tiny": {"n_layer": 2, "n_head": 2, "n_embd": 64}, "gpu": {"n_layer": 12, "n_head": 12, "n_embd": 768},
             "tiny-places": {"n_layer": 2, "n_head": 2, "n_embd": 64, **places}}

    def build_model(self, learning_rate: float, max_steps: int, size: str = "tiny", config: dict | None = None):
        from ...ml.gpt import LitGPT

        if config is None:
            if size not in self.sizes:
                raise ValueError(f"unknown model size {size!r}; choose one of {sorted(self.sizes)}")
            config = {"vocab_size": len(tokens.VOCAB), "block_size": tokens.BLOCK_SIZE, **self.sizes[size]}
        return LitGPT(config, learning_rate=learning_rate, max_steps=max_steps)

    def model_config(self, module):
        return dict(module.hparams["config"])  # LitGPT keeps the GPTConfig it was built from

    def encode(self, module, prompts, completions):
        rows = []
        for prompt, completion in zip(prompts, completions, strict=True):
            a, op, b = self._parse(prompt)
            if not problems.is_answer(completion):
                raise ValueError(f"not a trainable answer: {completion!r}")
            rows.append(tokens.model_prompt(a, op, b) + tokens.model_answer(int(completion)))
        ids = tokens.encode(rows, torch.uint8) if rows else torch.empty(0, tokens.BLOCK_SIZE, dtype=torch.uint8)
        mask = torch.zeros_like(ids, dtype=torch.bool)
        mask[:, tokens.PROMPT_LEN:] = True
        return ids, mask

    def answer(self, model, prompts):
        return self._complete(model, prompts)

    def sample(self, model, prompts, k, temperature, seed):
        generator = torch.Generator().manual_seed(seed)
        flat = self._complete(model, [p for p in prompts for _ in range(k)], temperature=temperature,
                              generator=generator)
        return [flat[i * k:(i + 1) * k] for i in range(len(prompts))]

    def hinted_answer(self, model, prompts, answers, critiques):
        # The critique names the wrong places; the hint forbids the digit given at the lowest of them, and the
        # model redoes the answer from there (digits run least significant first, so the place is the step).
        ban = torch.full((len(prompts), tokens.ANSWER_LEN), -1, dtype=torch.long)
        usable = []
        for i, (answer, critique) in enumerate(zip(answers, critiques, strict=True)):
            place = _first_wrong_place(critique)
            if place is None or not problems.is_answer(answer) or place >= tokens.ANSWER_LEN:
                continue
            ban[i, place] = tokens.STOI[tokens.model_answer(int(answer))[place]]
            usable.append(i)
        second = self._complete(model, [prompts[i] for i in usable], ban=ban[usable])
        out: list[str | None] = [None] * len(prompts)
        for i, text in zip(usable, second, strict=True):
            out[i] = text
        return out

    def plausible(self, prompt, completion):
        if not problems.is_answer(completion):
            return False
        a, op, b = self._parse(prompt)  # a sum has as many digits as its larger operand or one more
        longest = len(str(max(a, b)))
        return len(completion) in ((longest, longest + 1) if op == "+" else range(1, longest + 1))

    def checks(self, prompt, completion):
        # the inverse operations: a + b = c holds only if c - b = a and c - a = b; a - b = c only if c + b = a
        a, op, b = self._parse(prompt)
        if not problems.is_answer(completion) or len(str(int(completion))) > problems.WIDTH:
            return []
        c = int(completion)
        if op == "+":
            return [(f"{c}-{b}=", str(a)), (f"{c}-{a}=", str(b))]
        return [(f"{c}+{b}=", str(a))] + ([(f"{a}-{c}=", str(b))] if c <= a else [])

    def _complete(self, model, prompts, **decoding):
        from ...ml.decoding import decode

        net = getattr(model, "model", model)  # a LitGPT or its bare GPT
        parsed = [problems.parse(p) for p in prompts]
        valid = [i for i, p in enumerate(parsed) if p is not None]
        out = [""] * len(prompts)
        if valid:
            ids = tokens.encode([tokens.model_prompt(*parsed[i]) for i in valid])
            new = decode(net, ids, tokens.ANSWER_LEN, **decoding)
            for i, row in zip(valid, new.tolist(), strict=True):
                out[i] = tokens.read_answer(row)
        return out

    def is_valid_prompt(self, prompt):
        return problems.parse(prompt) is not None

    def is_valid_completion(self, completion):
        return problems.is_answer(completion)

    def slice_of(self, prompt):
        a, op, b = self._parse(prompt)
        return ("add" if op == "+" else "sub"), problems.tier_of(a, b)

    def canonical(self, prompt):
        a, op, b = self._parse(prompt)
        if op == "+":  # 3+5 and 5+3 are the same problem
            a, b = min(a, b), max(a, b)
        return f"{a}{op}{b}="

    def sample_tasks(self, rng, n, skills, tiers):
        tasks = []
        for _ in range(n):
            skill, tier = rng.choice(skills), rng.choice(tiers)
            prompt, value = problems.problem(rng, skill, tier)
            tasks.append(Task(prompt, str(value), skill, tier))
        return tasks

    def seed_tasks(self, rng):
        return [t for skill in self.skills
                for t in self.sample_tasks(rng, SEED_PER_SKILL, [skill], list(SEED_TIERS))]

    def verify(self, prompt, completion):
        parsed = problems.parse(prompt)
        if parsed is None:
            return 0.0, "The question is not a problem this model answers."
        want = str(problems.solve(*parsed))
        if not problems.is_answer(completion):
            return 0.0, f"The answer must be digits only; got {completion!r}."
        got = str(int(completion))
        if got == want:
            return 1.0, "Correct."
        if len(got) != len(want):
            return 0.0, f"The answer should have {len(want)} digits, not {len(got)}."
        places = [i for i, (g, w) in enumerate(zip(got[::-1], want[::-1], strict=True)) if g != w]
        names = ", ".join(_place(i) for i in places)
        return 0.0, f"Wrong digit in the {names} place; check the carry into it."

    def public_eval(self):
        lines = (Path(__file__).parent / "public_eval.jsonl").read_text().splitlines()
        return [Task(**json.loads(line)) for line in lines]

    def is_private_slice(self, skill, tier, items):
        # A slice can stay out of training only if it has far more problems than the eval draws.
        return problems.distinct_problems(skill, tier) >= 20 * items

    @staticmethod
    def _parse(prompt: str) -> tuple[int, str, int]:
        parsed = problems.parse(prompt)
        if parsed is None:
            raise ValueError(f"not an arithmetic prompt: {prompt!r}")
        return parsed


PLACE_NAMES = ["ones", "tens", "hundreds", "thousands"]


def _place(i: int) -> str:
    return PLACE_NAMES[i] if i < len(PLACE_NAMES) else f"10^{i}"


def _first_wrong_place(critique: str) -> int | None:
    """The lowest place a critique names ('Wrong digit in the tens, 10^5 place'), or None."""
    if not critique.startswith("Wrong digit in the "):
        return None
    names = critique.removeprefix("Wrong digit in the ").split(" place")[0].split(", ")
    places = [PLACE_NAMES.index(n) if n in PLACE_NAMES else int(n.removeprefix("10^")) for n in names]
    return min(places)
