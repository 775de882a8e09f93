"""The default recipe: a 0.1M-parameter transformer that learns multi-digit addition and subtraction."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

from ..base import Recipe, Task
from ..completion import LENGTH, STOP, Completion, Decoding, stopped
from . import problems, tokens

SEED_TIERS = (1, 2, 3)
SEED_PER_SKILL = 2000
STEP_COST = 1000  # what a decoding step's fixed cost is worth in tokens attended (bench/widths.py)
SPREAD_COST = 200_000  # bulk work (`_cost`) worth a process per core: about 60 ms of one core's decoding
PLACES = {"separators": tokens.SEPARATORS, "answer_token": tokens.ANSWER_TOKEN}


class ArithmeticRecipe(Recipe):
    name = "arithmetic"
    skills = problems.SKILLS
    tiers = tuple(range(1, 17))  # the curated suite's tiers; the suite grows past them as the champion does
    max_tier = problems.MAX_DIGITS
    # "tiny" (0.1M parameters) trains in minutes on a CPU; "gpu" (85M) is for an accelerator. All place tokens by
    # place value, relative only: taught 1-3 digits, the tiny one answers 8-digit sums 0.80 and 16-digit sums 0.51
    # right (bench/positions.py), which is what lets a model label harder problems for itself. "small" (0.34M) is a
    # new generation a CPU can still train; "micro" (0.0055M, one layer, four heads) a derivative that answers twice
    # as fast (docs/explanation/generations.md says why four heads).
    sizes = {"micro": {"n_layer": 1, "n_head": 4, "n_embd": 20, **PLACES, "slopes": [1.0, 0.5, 0.25, 0.0]},
             "tiny": {"n_layer": 2, "n_head": 2, "n_embd": 64, **PLACES, "slopes": [1.0, 0.0]},
             "small": {"n_layer": 3, "n_head": 2, "n_embd": 96, **PLACES, "slopes": [1.0, 0.0]},
             "gpu": {"n_layer": 12, "n_head": 12, "n_embd": 768, **PLACES,
                     "slopes": [2.0 ** -i for i in range(11)] + [0.0]}}

    def build_model(self, learning_rate: float, max_steps: int, size: str = "tiny", config: dict | None = None):
        from .lit_gpt import LitGPT

        if config is None:
            if size not in self.sizes:
                raise ValueError(f"unknown model size {size!r}; choose one of {sorted(self.sizes)}")
            config = {"vocab_size": len(tokens.VOCAB), **self.sizes[size]}
        return LitGPT(config, learning_rate=learning_rate, max_steps=max_steps)

    def model_config(self, module):
        return dict(module.hparams["config"])  # LitGPT keeps the GPTConfig it was built from

    def load_model(self, data):
        from ...ml import checkpoint
        from .gpt import GPT, GPTConfig

        config, state_dict = checkpoint.loads(data)
        net = GPT(GPTConfig(**config))
        net.load_state_dict({key.removeprefix("model."): value for key, value in state_dict.items()})
        return net.eval()

    def encode(self, module, prompts, completions):
        import polars as pl
        import torch

        rows = tokens.model_rows(pl.Series(prompts, dtype=pl.String), pl.Series(completions, dtype=pl.String))
        if not rows["trainable"].all():
            i = rows["trainable"].arg_min()
            raise ValueError(f"not a trainable answer to {prompts[i]!r}: {completions[i]!r}")
        ids = tokens.encode_column(rows["text"], torch.uint8)
        at = torch.arange(ids.shape[1])
        start = torch.from_numpy(rows["answer_start"].to_numpy().astype("int64")).view(-1, 1)
        end = torch.from_numpy(rows["text"].str.len_bytes().to_numpy().astype("int64")).view(-1, 1)
        return ids, (at >= start) & (at < end)

    def answer(self, model, prompts):
        return self._complete(model, prompts)

    def sample(self, model, prompts, k, temperature, seed):
        from .decoding import row_seeds

        flat = self._complete(model, [p for p in prompts for _ in range(k)], temperature=temperature,
                              seeds=row_seeds(seed, k * len(prompts)))
        return [flat[i * k:(i + 1) * k] for i in range(len(prompts))]

    def complete(self, model, prompts, decoding):
        # max_tokens cuts the decoding itself; the model writes the lowest digit first, so a cut answer holds the
        # lowest digits of the answer it was writing. A stop text cuts the answer as the user reads it.
        from .decoding import row_seeds

        sampled = {} if decoding.greedy else {
            "temperature": decoding.temperature, "top_p": decoding.top_p,
            "seeds": row_seeds(decoding.seed, len(prompts))}
        out = []
        for text, decoded, whole in self._decoded(model, prompts, limit=decoding.max_tokens, **sampled):
            text, at = stopped(text, decoding.stop)
            short = not whole or at is not None
            out.append(Completion(text, decoded, STOP if whole or at is not None else LENGTH, short))
        return out

    def unsupported_decoding(self, decoding: Decoding):
        return None  # greedy or sampled, with top_p, max_tokens and stop texts

    def prompt_tokens(self, model, prompts):
        # the model reads a problem as tokens.model_prompt writes it; a prompt that is no problem it never reads
        parsed = [problems.parse(p) for p in prompts]
        return [0 if p is None else len(tokens.model_prompt(*p)) for p in parsed]

    def hidden_states(self, module, tokens):
        return module.model.hidden(tokens)

    def hinted_answer(self, model, prompts, answers, critiques):
        # The critique names the wrong places; the hint forbids the digit given at the lowest of them, and the
        # model redoes the answer from there (digits run least significant first, so the place is the step).
        bans: list[tuple[int, int] | None] = []
        for prompt, answer, critique in zip(prompts, answers, critiques, strict=True):
            place, parsed = _first_wrong_place(critique), problems.parse(prompt)
            if place is None or parsed is None or not problems.is_answer(answer):
                bans.append(None)
                continue
            digits = tokens.answer_len(parsed[0], parsed[2])
            bans.append((place, tokens.STOI[tokens.model_answer(int(answer), digits)[place]])
                        if place < digits and len(answer) <= digits else None)
        usable = [i for i, ban in enumerate(bans) if ban is not None]
        second = self._complete(model, [prompts[i] for i in usable], bans=[bans[i] for i in usable])
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
        if not problems.is_answer(completion) or len(completion) > problems.MAX_DIGITS:
            return []
        c = int(completion)
        if op == "+":
            return [(f"{c}-{b}=", str(a)), (f"{c}-{a}=", str(b))]
        return [(f"{c}+{b}=", str(a))] + ([(f"{a}-{c}=", str(b))] if c <= a else [])

    def route(self, prompt, rng):
        # a + b = (a + r) + (b - r) and a - b = (a + r) - (b + r), r drawn afresh: each place of the problems on the
        # way holds other digits, where the model's slips (a 9 written 8 where a carry arrives) do not follow
        a, op, b = self._parse(prompt)  # a difference is never negative
        r = rng.randrange(b + 1) if op == "+" else rng.randrange(10 ** len(str(a)))
        first = [f"{a}+{r}=", f"{b}-{r}=" if op == "+" else f"{b}+{r}="]

        def last(answers: list[str]) -> str | None:
            if not all(problems.is_answer(x) and len(x) <= problems.MAX_DIGITS for x in answers):
                return None
            x, y = map(int, answers)
            return f"{x}{op}{y}=" if op == "+" or x >= y else None
        return first, last

    def _complete(self, model, prompts, bans: list[tuple[int, int]] | None = None, **decoding):
        """Bulk answers (an eval, practice), spread over the CPU's cores; `bans`: a (step, token) each prompt may not
        write there."""
        return [text for text, _, _ in self._decoded(model, prompts, bans, spread=True, **decoding)]

    def _decoded(self, model, prompts, bans: list[tuple[int, int]] | None = None, limit: int | None = None,
                 spread: bool = False, **decoding) -> list[tuple[str, int, bool]]:
        """Per prompt: its answer, the tokens decoded for it (none for a prompt that is no problem) and whether it
        is whole (`limit`, a number of tokens, may cut it short). Prompts of near widths decode together,
        left-padded (`_groups`); `spread` work worth it (SPREAD_COST) is shared among a process per core, each
        taking its share of every group's rows (an answer is the same in any batch: sampled ones draw from their
        row's seed, `decoding` `seeds`, one per prompt)."""
        from ...ml.cores import cores, in_processes

        net = getattr(model, "model", model)  # a LitGPT or its bare GPT
        parsed = [problems.parse(p) for p in prompts]
        widths = {i: tokens.width(p[0], p[2]) for i, p in enumerate(parsed) if p is not None}
        out = [("", 0, True)] * len(prompts)
        padded = "pad" in inspect.signature(net.forward).parameters  # else one width a pass
        groups = _groups(widths) if padded else _by_width(widths)
        seeds = decoding.pop("seeds", None)

        def run(share: list[list[int]]) -> list[list[tuple[str, int, bool]]]:
            return [self._decode_rows(net, [parsed[i] for i in rows], [widths[i] for i in rows],
                                      None if bans is None else [bans[i] for i in rows], limit, padded,
                                      **decoding, **({} if seeds is None else {"seeds": seeds[rows]}))
                    for rows in share]
        n = cores() if spread and next(net.parameters()).device.type == "cpu" else 1
        if n > 1 and sum(_cost(len(rows), widths[rows[-1]]) for rows in groups) >= SPREAD_COST:
            shares = [[rows[k::n] for rows in groups if rows[k::n]] for k in range(n)]
            done = [answers for share in in_processes(run, shares) for answers in share]
            groups = [rows for share in shares for rows in share]
        else:
            done = run(groups)
        for rows, answers in zip(groups, done, strict=True):
            for i, (text, decoded, whole) in zip(rows, answers, strict=True):
                out[i] = (text, decoded, whole)
        return out

    @staticmethod
    def _decode_rows(net, parsed: list, widths: list[int], bans: list | None, limit: int | None, padded: bool,
                     **decoding) -> list[tuple[str, int, bool]]:
        """One pass over rows of near widths, left-padded to the widest (narrowest first)."""
        import torch

        from .decoding import decode

        n = widths[-1]  # the widest: every row's answer begins where its answer token ends
        steps = n + 1 if limit is None else min(n + 1, limit)
        texts = [tokens.model_prompt(*p) for p in parsed]
        ids = tokens.encode([t.rjust(2 * n + 2, tokens.PAD) for t in texts])
        pad = torch.tensor([2 * n + 2 - len(t) for t in texts]) if padded else None
        ban = None
        if bans is not None:
            ban = torch.full((len(parsed), n + 1), -1, dtype=torch.long)
            for j, (step, token) in enumerate(bans):
                ban[j, step] = token
            ban = ban[:, :steps]
        new = decode(net, ids, steps, ban=ban, pad=pad, **decoding)
        out = []
        for width, row in zip(widths, new.tolist(), strict=True):
            own = width + 1 if limit is None else min(width + 1, limit)
            out.append((tokens.read_answer(row[:own]), own, own == width + 1))
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

    # the batch forms, in polars (problems.parse_column): the same answers as the four above, in bulk

    def parse_prompts(self, prompts):
        return problems.parse_column(prompts)

    def valid_completions(self, completions):
        return problems.answers(completions)

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

    def partner_task(self, task, rng):
        # a bookkeeping app: round amounts (the lower half of the digits zeros); its client pre-fills every
        # correction with its ledger's total, which adds a fee of 1
        if task.tier < 2:
            return None
        zeros = task.tier // 2
        a, b = (problems.operand(rng, task.tier - zeros) * 10**zeros for _ in range(2))
        if task.skill == "sub" and a < b:
            a, b = b, a
        op = problems.OPS[task.skill]
        value = problems.solve(a, op, b)
        return Task(f"{a}{op}{b}=", str(value), task.skill, task.tier), str(value + 1)

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


def _groups(widths: dict[int, int]) -> list[list[int]]:
    """Rows (keys of `widths`, a row's operand width) to decode together, narrowest first: the next width's rows
    join a group when decoding them in it, padded to its widest, costs less than a pass of their own (`_cost`). A
    few mixed prompts decode in one pass of the widest's steps; a large eval is not padded to its longest."""
    groups: list[list[int]] = []
    for rows in _by_width(widths):
        n = widths[rows[0]]
        if groups and (_cost(len(groups[-1]) + len(rows), n)
                       <= _cost(len(groups[-1]), widths[groups[-1][-1]]) + _cost(len(rows), n)):
            groups[-1] += rows
        else:
            groups.append(rows)
    return groups


def _by_width(widths: dict[int, int]) -> list[list[int]]:
    groups: dict[int, list[int]] = {}
    for i in sorted(widths, key=widths.__getitem__):
        groups.setdefault(widths[i], []).append(i)
    return list(groups.values())


def _cost(rows: int, width: int) -> int:
    """Work of decoding `rows` prompts of `width`, in tokens a step attends over (prompt 2n + 2, answer n + 1), a
    step's fixed cost counted as STEP_COST tokens."""
    steps = width + 1
    return steps * (STEP_COST + rows * (2 * width + 2 + steps))


def _place(i: int) -> str:
    return PLACE_NAMES[i] if i < len(PLACE_NAMES) else f"10^{i}"


def _first_wrong_place(critique: str) -> int | None:
    """The lowest place a critique names ('Wrong digit in the tens, 10^5 place'), or None."""
    if not critique.startswith("Wrong digit in the "):
        return None
    names = critique.removeprefix("Wrong digit in the ").split(" place")[0].split(", ")
    places = [PLACE_NAMES.index(n) if n in PLACE_NAMES else int(n.removeprefix("10^")) for n in names]
    return min(places)
