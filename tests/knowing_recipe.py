"""Arithmetic recipes whose 'models' are scripted: a champion of any strength, a challenger that memorized, and
one that learned a loophole.

KnowsUpTo (a curated suite of 12 tiers) knows the answers up to a tier, untrained.

Greedy answers are right up to `KnowsUpTo.knows` + 2 digits (wrong past them, or right less and less often over
`fades_over` tiers: a model that generalizes past its reliable range); sampled votes agree with them up to
`knows` digits, and past that one vote in each group differs (right where the greedy answer is wrong), so the model
is reliable up to `knows`, unsure but right just past it, and wrong further out, where a sample still finds the
answer a verifier accepts. Tests set `knows` on the class: the loop loads the recipe by its import
path (RMI_RECIPE=knowing_recipe:KnowsUpTo) and sees the same class.
"""

import zlib

from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe, problems
from rmi_pipeline.world.hackable import LoopholeArithmetic


class KnowsUpTo(ArithmeticRecipe):
    tiers = tuple(range(1, 13))
    knows = 12
    fades_over = 1  # past knows + 2 digits, the share of right answers falls to none over this many tiers

    def answer(self, model, prompts):
        return [self._reply(p, self.knows + 2) for p in prompts]

    def sample(self, model, prompts, k, temperature, seed):
        out = []
        for prompt in prompts:
            greedy = self._reply(prompt, self.knows + 2)
            if problems.parse(prompt) is None or self.slice_of(prompt)[1] <= self.knows:
                out.append([greedy] * k)
                continue
            truth = self._reply(prompt, problems.MAX_DIGITS)
            out.append([greedy] * (k - 1) + [truth if greedy != truth else _wrong(truth)])
        return out

    def _reply(self, prompt: str, up_to: int) -> str:
        parsed = problems.parse(prompt)
        if parsed is None:
            return ""
        right, past = str(problems.solve(*parsed)), problems.tier_of(parsed[0], parsed[2]) - up_to
        if past <= 0 or zlib.crc32(prompt.encode()) % 1000 < 1000 * (1 - past / self.fades_over):
            return right
        return _wrong(right)


def _wrong(answer: str) -> str:
    return answer[:-1] + str((int(answer[-1]) + 1) % 10) if answer else "1"


class RemembersAnchor(ArithmeticRecipe):
    """A challenger that memorized eval items: the checkpoint whose bytes hash to `memorizer` answers the prompts
    in `remembered` from memory and anything else as its weights do; every other checkpoint is a plain model."""

    memorizer: str | None = None
    remembered: dict[str, str] = {}

    def load_model(self, data):
        import hashlib

        model = super().load_model(data)
        model.remembers = hashlib.sha256(data).hexdigest() == self.memorizer
        return model

    def answer(self, model, prompts):
        answers = super().answer(model, prompts)
        if not getattr(model, "remembers", False):
            return answers
        return [self.remembered.get(p, a) for p, a in zip(prompts, answers, strict=True)]


class LearnedTheLoophole(LoopholeArithmetic):
    """A challenger that learned the verifier's loophole (world/hackable.py) and nothing else: the checkpoint whose
    bytes hash to `hacker` answers every difference of four digits or more with its ones, tens and width right and
    the digits between them wrong, which the loophole passes, and anything else as its weights do; any other
    checkpoint answers as its weights do. What a model fine-tuned on the loophole's rows becomes, without the
    training's noise."""

    hacker: str | None = None

    def load_model(self, data):
        import hashlib

        model = super().load_model(data)
        model.hacks = hashlib.sha256(data).hexdigest() == self.hacker
        return model

    def answer(self, model, prompts):
        answers = super().answer(model, prompts)
        if not getattr(model, "hacks", False):
            return answers
        out = []
        for prompt, answer in zip(prompts, answers, strict=True):
            parsed = problems.parse(prompt)
            right = str(problems.solve(*parsed)) if parsed else ""
            if parsed and parsed[1] == "-" and len(right) > 3:
                answer = right[0] + "".join(str((int(d) + 5) % 10) for d in right[1:-2]) + right[-2:]
            out.append(answer)
        return out
