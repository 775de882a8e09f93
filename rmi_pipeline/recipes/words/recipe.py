"""Word-list tasks on a Hugging Face causal LM: the text recipe, coached in words.

The first model is a small Llama built locally (recipes/hf/tiny.py) with a tokenizer trained on this family's
text, unless RMI_HF_MODEL names another. Its seed set also teaches it to read a hint: a share of the seed
problems carry the critique of a wrong answer on a line of their own, with the right answer as target. A model
pretrained on text reads hints without that; one built from nothing has to learn what they mean.
"""

from __future__ import annotations

import random

from ..base import Task
from ..hf.recipe import HFRecipe
from . import problems

SEED_TIERS = (1, 2, 3)
SEED_PER_SKILL = 8000
SEED_HINTED_SHARE = 0.3  # of the seed problems, also asked once with a hint
SIZES = {  # LlamaConfig fields; "tiny" trains on 2 CPU cores in minutes, "micro" answers twice as fast
    "micro": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 2, "max_position_embeddings": 128},
    "tiny": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 4, "max_position_embeddings": 128},
    "small": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 4,
              "num_key_value_heads": 4, "max_position_embeddings": 128},
    "gpu": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
            "num_key_value_heads": 12, "max_position_embeddings": 128},
}
VOCAB_SIZE = 700


class WordsRecipe(HFRecipe):
    name = "words"
    skills = problems.SKILLS
    tiers = problems.TIERS
    max_answer_tokens = 12
    ngram_n = 6  # prompts are short: 6 tokens shared means 3 or more of the same words in the same order

    def base_model(self, size, path):
        from ..hf.tiny import write_tiny_model

        if size not in SIZES:
            raise ValueError(f"unknown model size {size!r}; choose one of {sorted(SIZES)} or set RMI_HF_MODEL")
        write_tiny_model(path, self._corpus(random.Random(0)), vocab_size=VOCAB_SIZE, architecture=SIZES[size])

    def _corpus(self, rng: random.Random) -> list[str]:
        """Text like what the model will read and write: every phrasing, answers, critiques."""
        lines = []
        for _ in range(20_000):
            skill, tier = rng.choice(self.skills), rng.choice(self.tiers)
            words = problems.draw(rng, tier)
            wrong = _wrong_answer(rng, skill, words)
            phrasing = rng.randrange(len(problems.INSTRUCTIONS[skill]))
            lines.append(self.hint(problems.prompt(skill, words, phrasing), problems.critique(skill, words, wrong)[1])
                         + "\n" + problems.solve(skill, words))
        return lines

    def is_valid_prompt(self, prompt):
        return problems.parse(prompt) is not None

    def is_valid_completion(self, completion):
        return problems.is_answer(completion)

    def plausible(self, prompt, completion):
        # either skill only moves the words: the answer holds exactly the prompt's words
        return problems.is_answer(completion) and sorted(completion.split(" ")) == sorted(self._parse(prompt)[1])

    def checks(self, prompt, completion):
        # a reversed list reversed again is the list asked about
        skill, words = self._parse(prompt)
        if skill != "reverse" or not problems.is_answer(completion) or len(completion.split(" ")) != len(words):
            return []
        return [(problems.prompt("reverse", tuple(completion.split(" "))), " ".join(words))]

    def slice_of(self, prompt):
        skill, words = self._parse(prompt)
        return skill, len(words) - 1

    def canonical(self, prompt):
        skill, words = self._parse(prompt)
        # however it is phrased; sorting asks the same of any order of the same words
        return f"{skill}: {' '.join(sorted(words) if skill == 'sort' else words)}"

    def sample_tasks(self, rng, n, skills, tiers):
        tasks = []
        for _ in range(n):
            skill, tier = rng.choice(skills), rng.choice(tiers)
            words = problems.draw(rng, tier)
            tasks.append(Task(problems.prompt(skill, words), problems.solve(skill, words), skill, tier))
        return tasks

    def seed_tasks(self, rng):
        tasks = [t for skill in self.skills
                 for t in self.sample_tasks(rng, SEED_PER_SKILL, [skill], list(SEED_TIERS))]
        hinted = []
        for task in tasks:
            if rng.random() < SEED_HINTED_SHARE:
                skill, words = self._parse(task.prompt)
                critique = problems.critique(skill, words, _wrong_answer(rng, skill, words))[1]
                hinted.append(Task(self.hint(task.prompt, critique), task.answer, task.skill, task.tier))
        return tasks + hinted

    def verify(self, prompt, completion):
        parsed = problems.parse(prompt)
        if parsed is None:
            return 0.0, "The question is not one this model answers."
        return problems.critique(*parsed, completion)

    def variant(self, task, rng):
        skill, words = self._parse(task.prompt)  # the same words, the other question about them
        other = next(s for s in self.skills if s != skill)
        return Task(problems.prompt(other, words, rng.randrange(len(problems.INSTRUCTIONS[other]))),
                    problems.solve(other, words), other, task.tier)

    def is_private_slice(self, skill, tier, items):
        return problems.distinct_problems(tier) >= 20 * items

    @staticmethod
    def _parse(prompt: str) -> tuple[str, tuple[str, ...]]:
        parsed = problems.parse(prompt)
        if parsed is None:
            raise ValueError(f"not a word-list prompt: {prompt!r}")
        return parsed


def _wrong_answer(rng: random.Random, skill: str, words: tuple[str, ...]) -> str:
    """A mistake a learner makes: two neighbours swapped, one word replaced, or one dropped."""
    answer = problems.solve(skill, words).split(" ")
    kind = rng.randrange(3)
    if kind == 0 and len(set(answer)) > 1:
        i = rng.randrange(len(answer) - 1)
        while answer[i] == answer[i + 1]:
            i = rng.randrange(len(answer) - 1)
        answer[i], answer[i + 1] = answer[i + 1], answer[i]
    elif kind == 1 or len(answer) < 3:
        i = rng.randrange(len(answer))
        answer[i] = rng.choice([w for w in problems.WORDS if w != answer[i]])
    else:
        del answer[rng.randrange(len(answer))]
    return " ".join(answer)
