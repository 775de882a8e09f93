"""How the champion teaches its successor: RL groups, a coach's hints, self-labels, and the training mix."""

import random
import zlib

import pytest
import torch

from rmi_pipeline.ml.rl import coach, rollouts
from rmi_pipeline.ml.self_label import self_label
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe, problems
from rmi_pipeline.recipes.arithmetic import tokens as tok
from rmi_pipeline.settings import Sampling, SelfLabelling

R = ArithmeticRecipe()


def labelling(problems: int, past_suite: bool = True) -> SelfLabelling:
    return SelfLabelling(problems=problems, votes=4, past_suite=past_suite)


SAMPLED = {"tiers": 1, "temperature": 1.0, "saturation": 0.9}  # what self-labelling takes from other groups


class UpTo12Digits(ArithmeticRecipe):
    """A model reliable at every tier is measured up to the recipe's hardest: 12 digits keeps these tests short."""

    max_tier = 12


class Scripted(torch.nn.Module):
    """A model whose next-token scores depend only on the answer step: {step: {token: score}}; else '0'."""

    def __init__(self, script: dict[int, dict[str, float]]):
        super().__init__()
        self.script = script
        self.p = torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx):
        step = idx.shape[1] - 1 - int((idx[0] == tok.ANSWER_TOKEN).nonzero()[0])
        logits = torch.full((*idx.shape, len(tok.VOCAB)), -20.0)
        for token, score in self.script.get(step, {"0": 10.0}).items():
            logits[:, -1, tok.STOI[token]] = score
        return logits


def test_a_hint_from_the_critique_turns_a_failure_into_a_distilled_success():
    model = Scripted({0: {"7": 2.0, "8": 1.0}})  # says 7; its second choice is 8
    assert R.answer(model, ["3+5="]) == ["7"]
    critique = R.verify("3+5=", "7")[1]
    assert R.hinted_answer(model, ["3+5="], ["7"], [critique]) == ["8"]
    result = coach(R, model, ["3+5=", "3+4="], temperature=1.0, seed=0)
    assert (result.failed, result.hinted, result.solved_with_hint) == (1, 1, 1)
    assert result.rows == [{"prompt": "3+5=", "target": "8", "teacher": None}]  # the hint is not in the row


def test_a_critique_without_a_usable_hint_gives_no_second_attempt():
    model = Scripted({0: {"7": 2.0}, 1: {"7": 2.0}})  # "77": the wrong number of digits, no place to fix
    assert R.hinted_answer(model, ["3+5="], ["77"], [R.verify("3+5=", "77")[1]]) == [None]


def test_rl_rewards_answers_against_their_group_and_drops_groups_that_all_score_alike():
    model = Scripted({0: {"7": 1.0, "8": 1.0}})  # a coin flip between 7 and 8
    prompts = ["3+5=", "0+0="]
    out = rollouts(R, prompts, R.sample(model, prompts, 16, 1.0, seed=1))
    assert out.informative_groups == 1 and {r["prompt"] for r in out.rows} == {"3+5="}  # 0+0 is never 7 or 8
    right = [r["scale"] for r in out.rows if r["target"] == "8"]
    wrong = [r["scale"] for r in out.rows if r["target"] == "7"]
    assert right and wrong and min(right) > 0 > max(wrong)
    assert abs(sum(right) + sum(wrong)) < 1e-9  # group-relative: advantages sum to zero
    assert 0 < out.solved_share < 1 and out.samples == 32
    assert {r["reference"] for r in out.rows if r["target"] == "7"} == {"8"}  # each wrong answer names a right one
    assert {r["reference"] for r in out.rows if r["target"] == "8"} == {None}


def test_a_wrong_answer_is_pushed_down_only_at_its_first_mistake():
    from rmi_pipeline.ml.rl import first_mistake

    tokens, mask = R.encode(None, ["15+5=", "15+5="], ["10", "20"])  # the model writes the ones first: 0,1 and 0,2
    reference, _ = R.encode(None, ["15+5=", "15+5="], ["20", "20"])
    cut = first_mistake(tokens, mask, reference)
    first = len(tok.model_prompt(15, "+", 5))
    assert cut[0].nonzero().flatten().tolist() == [first + 1]  # the tens digit; the right ones digit is kept
    assert not cut[1].any()  # the right answer itself has nothing to push down


def test_self_labels_come_from_the_first_unsure_tier_and_pass_the_length_filter():
    confident = Scripted({0: {"7": 30.0}})  # always "7": agrees with itself everywhere
    out = self_label(UpTo12Digits(), confident, random.Random(0), labelling(problems=50), seed=0, **SAMPLED)
    # 1-digit sums may be 7; a 2-digit sum cannot have 1 digit, so the length filter rejects every label there
    assert out.agreement["add/1"] == 1.0 and out.agreement["add/2"] == 0.0
    assert out.tiers["add"] == 2 and not [r for r in out.rows if r["prompt"].count("+")]
    # a difference may be a single digit at any tier: reliable up to the recipe's hardest, nothing past it to label
    assert out.agreement["sub/12"] == 1.0 and "sub" not in out.tiers


class Slipping(UpTo12Digits):
    """A 'model' that drops the carry out of the ones in sums of 2 digits or more. Where both ones digits are 5 or
    more it is sure of that (every vote agrees); on other carries one vote in four is right. Subtraction it gets
    right."""

    def answer(self, model, prompts):
        return [self.slip(p) for p in prompts]

    def sample(self, model, prompts, k, temperature, seed):
        return [[self.slip(p)] * k if self.sure(p) else [self.slip(p)] * (k - 1) + [right(p)] for p in prompts]

    def route(self, prompt, rng):
        return None  # working back alone: its slips on a route's sums would drop the labels it rescues here

    @staticmethod
    def carries(p):
        a, op, b = problems.parse(p)
        return op == "+" and problems.tier_of(a, b) >= 2 and a % 10 + b % 10 >= 10

    @classmethod
    def slip(cls, p):
        return str(int(right(p)) - 10) if cls.carries(p) else right(p)

    @classmethod
    def sure(cls, p):
        a, _, b = problems.parse(p)
        return cls.carries(p) and a % 10 >= 5 and b % 10 >= 5


class SlippingWithoutChecks(Slipping):
    def checks(self, prompt, completion):
        return []


def right(prompt):
    return str(problems.solve(*problems.parse(prompt)))


def test_a_self_label_is_kept_only_if_the_model_backs_it_up_by_working_back_from_it():
    def labels(recipe):
        out = self_label(recipe, None, random.Random(0), labelling(problems=200), seed=0, **SAMPLED)
        assert out.tiers == {"add": 2}  # the votes split on carries there; subtraction never leaves its sure range
        return {r["prompt"]: r["target"] for r in out.rows}

    votes_only = labels(SlippingWithoutChecks())
    assert {p for p, t in votes_only.items() if t != right(p)} == {p for p in votes_only if Slipping.sure(p)} != set()
    checked = labels(Slipping())
    assert all(t == right(p) for p, t in checked.items())  # 57+68=115 is refuted: the model says 115-68=47
    rescued = [p for p in checked if Slipping.carries(p)]  # greedy was wrong; the vote that passed its checks won
    assert rescued and not any(Slipping.sure(p) for p in rescued)
    assert set(checked) >= {p for p in votes_only if not Slipping.sure(p)}


class SureOfItsSlips(UpTo12Digits):
    """A 'model' with slips of its own, as a climb's champion had past 30 digits: one sum in three of two numbers of
    2 digits or more it gets wrong, every vote agrees, and working back it answers as if the slip were right (c' - b
    = a); everything else it answers right. Its slips are of the problem asked, so a problem on another way is not."""

    def __init__(self):
        self.slips = {}  # (the wrong sum, one operand) -> the other operand, as it would work back

    def reply(self, prompt):
        a, op, b = problems.parse(prompt)
        if op == "-":
            return str(self.slips.get((a, b), a - b))
        if min(a, b) < 10 or zlib.crc32(prompt.encode()) % 3:
            return str(a + b)
        wrong = a + b + 10 * (1 + zlib.crc32(prompt.encode()) % 997)
        self.slips |= {(wrong, b): a, (wrong, a): b}
        return str(wrong)

    def answer(self, model, prompts):
        return [self.reply(p) for p in prompts]

    def sample(self, model, prompts, k, temperature, seed):
        return [[self.reply(p)] * k for p in prompts]


class SureOfItsSlipsWithoutRoute(SureOfItsSlips):
    def route(self, prompt, rng):
        return None


def test_a_label_the_model_backs_up_with_its_own_slips_is_dropped_on_the_way_through_other_problems():
    def labels(recipe):
        out = self_label(recipe, None, random.Random(0), labelling(problems=300), seed=0,
                     last={"add": 5, "sub": 12}, **SAMPLED)
        assert out.tiers == {"add": 5}
        return {r["prompt"]: r["target"] for r in out.rows}

    checked = labels(SureOfItsSlipsWithoutRoute())
    wrong = {p for p, t in checked.items() if t != right(p)}
    assert len(wrong) > 50  # working back, it agrees with its slips
    routed = labels(SureOfItsSlips())
    assert all(t == right(p) for p, t in routed.items())  # a + r and b - r, then their sum, reach the right answer
    # the way holds two sums, each a slip one time in three: about 4 right labels in 9 are kept (86 of 207)
    assert len(routed) >= 0.35 * (len(checked) - len(wrong))


class Exact(UpTo12Digits):
    """A 'model' that answers every problem right and every vote with it."""

    def answer(self, model, prompts):
        return [right(p) for p in prompts]

    def sample(self, model, prompts, k, temperature, seed):
        return [[right(p)] * k for p in prompts]


def test_a_model_reliable_up_to_the_suites_top_tier_labels_the_top_tiers_instead_of_nothing():
    out = self_label(Exact(), None, random.Random(0), labelling(problems=20), seed=0,
                     last={"add": 5, "sub": 12}, **SAMPLED)
    assert out.tiers == {"add": 5}  # sure of itself up to the bound, which is not the recipe's hardest: label there
    assert out.kept == {"add/5": 20} and all(t == right(p) for p, t in ((r["prompt"], r["target"]) for r in out.rows))
    assert {problems.tier_of(*problems.parse(r["prompt"])[::2]) for r in out.rows} == {5}
    # subtraction is bounded by the recipe's hardest tier: nothing is left past it, nothing is labelled


def test_a_model_reliable_past_the_suites_top_tier_also_labels_at_its_own_edge_there():
    from knowing_recipe import KnowsUpTo

    def labelled(past_suite: bool) -> set:
        out = self_label(KnowsUpTo(), None, random.Random(0), labelling(50, past_suite), seed=0,
                         last={"add": 6, "sub": 6}, **SAMPLED)
        assert all(r["target"] == right(r["prompt"]) for r in out.rows)  # greedy is right up to 14 digits
        return {R.slice_of(r["prompt"]) for r in out.rows}

    # reliable up to 12 digits, unsure at 13: besides the suite's top tier, where it learns nothing new, its edge
    assert labelled(past_suite=True) == {("add", 6), ("add", 13), ("sub", 6), ("sub", 13)}
    assert labelled(past_suite=False) == {("add", 6), ("sub", 6)}


class SplitPast8Digits(UpTo12Digits):
    """A 'model' right at differences, and at sums up to 8 digits; past them its sums are wrong, and so are its
    votes, split between two wrong answers. It counts the problems it is sampled on, per slice."""

    def __init__(self):
        self.sampled = {}

    def reply(self, prompt, vote=False):
        slice_ = self.slice_of(prompt)
        return str(int(right(prompt)) + (10 + 10 * vote) * (slice_[0] == "add" and slice_[1] > 8))

    def answer(self, model, prompts):
        return [self.reply(p) for p in prompts]

    def sample(self, model, prompts, k, temperature, seed):
        for p in prompts:
            self.sampled[self.slice_of(p)] = self.sampled.get(self.slice_of(p), 0) + 1
        return [[self.reply(p)] * (k - 1) + [self.reply(p, vote=True)] for p in prompts]


def test_past_the_suite_a_tier_whose_first_problems_keep_no_label_is_not_labelled_further():
    from rmi_pipeline.ml.curriculum import FEWEST, LOOKS, measured_at

    recipe = SplitPast8Digits()
    out = self_label(recipe, None, random.Random(0), labelling(problems=200), seed=0,
                     last={"add": 4, "sub": 4}, **SAMPLED)
    assert out.past == {"add": 9} and out.kept["add/9"] == 0  # working back refutes both its answers
    # the edge's probe, stopped after its first third (every problem there split its votes), then FEWEST problems
    # to label, not 200
    assert recipe.sampled[("add", 9)] == measured_at(100, 9) // LOOKS + FEWEST
    assert out.kept["add/4"] == out.kept["sub/4"] == 200 and {r["prompt"].count("+") for r in out.rows} == {0, 1}


def test_a_long_edge_past_the_suite_is_found_to_within_2_percent_and_probes_past_it_stop_early():
    """Past the suite, finding the edge was most of a long climb's practice: it is found to within SEARCH_WITHIN, and
    a probe stops once the problems it asked show the tier cannot be reliable."""
    from knowing_recipe import KnowsUpTo

    from rmi_pipeline.ml.curriculum import LOOKS, first_unsolved, measured_at

    class Knows530(KnowsUpTo):  # reliable up to 530 digits, and sure of nothing past them
        knows, sampled = 530, {}

        def sample(self, model, prompts, k, temperature, seed):
            for p in prompts:
                self.sampled[self.slice_of(p)] = self.sampled.get(self.slice_of(p), 0) + 1
            return super().sample(model, prompts, k, temperature, seed)

    recipe = Knows530()
    out = self_label(recipe, None, random.Random(0), labelling(problems=50), seed=0,
                     last={"add": 12, "sub": 12}, **SAMPLED)
    assert 531 - 0.02 * 530 - 1 <= out.past["add"] <= 531  # never past the edge, never short by more than 2%
    probed = [name for name in out.agreement if name.startswith("add/") and int(name.split("/")[1]) > 12]
    to_the_digit: list[int] = []
    first_unsolved(lambda t: to_the_digit.append(t) or t <= 530, 13, 1000)
    assert len(probed) <= len(to_the_digit) - 2
    assert out.agreement["add/1000"] == 0.0  # every vote there disagrees: a third of its problems decided it
    assert recipe.sampled[("add", 1000)] == measured_at(100, 1000) // LOOKS
    assert recipe.sampled[("add", 523)] == measured_at(100, 523)  # a reliable tier asks them all


def test_arithmetic_checks_work_back_from_an_answer_by_the_inverse_operation():
    assert R.checks("57+68=", "125") == [("125-68=", "57"), ("125-57=", "68")]
    assert R.checks("125-68=", "57") == [("57+68=", "125"), ("125-57=", "68")]
    assert R.checks("99999999+1=", "100000000") == [("100000000-1=", "99999999"), ("100000000-99999999=", "1")]
    assert R.checks("5-3=", "x") == []


def test_the_training_mix_rejects_unknown_sources(monkeypatch):
    from rmi_pipeline.settings import DEFAULT_MIX, Settings

    monkeypatch.setenv("RMI_MIX", '{"rl": 0}')
    assert Settings().mix == {**DEFAULT_MIX, "rl": 0.0}
    monkeypatch.setenv("RMI_MIX", '{"reinforcement": 1}')
    with pytest.raises(ValueError, match="unknown training sources"):
        Settings()


def test_the_model_taught_up_to_3_digits_answers_longer_sums():
    """What self-labelling stands on: positions by place, relative only, carry what is learned to longer numbers."""
    from rmi_pipeline.ml.train import fit

    torch.manual_seed(0)  # the same first weights whatever ran before
    model = R.build_model(learning_rate=3e-3, max_steps=2000)
    seed_set = R.seed_tasks(random.Random(0))
    fit(model, *R.encode(model, [t.prompt for t in seed_set], [t.answer for t in seed_set]), max_steps=2000,
        max_seconds=600, seed=1)
    rng = random.Random(5)
    taught, beyond, far = (sum(R.correct(model, R.sample_tasks(rng, 200, ["add"], [tier]))) / 200 for tier in (3, 4, 6))
    assert taught > 0.9 and beyond > 0.6 and far > 0.3, (taught, beyond, far)


def test_the_frontier_practice_and_self_labels_move_past_the_recipe_s_initial_top_tier():
    from knowing_recipe import KnowsUpTo

    from rmi_pipeline.ml.practice import practise
    from rmi_pipeline.settings import Practice

    recipe = KnowsUpTo()  # reliable up to 12 digits, the top of the curated tiers; right but unsure at 13 and 14
    assert recipe.knows == recipe.tiers[-1] == 12
    made = practise(recipe, None, {"practice": 0.1, "rl": 0.1, "hint_distill": 0, "self_label": 0.1}, [],
                    random.Random(0), 0, practice=Practice(problems=50, tiers=2, failed_prompts=0),
                    sampling=Sampling(rollouts=4, temperature=1.0), self_labelling=labelling(problems=50),
                    saturation=0.9)
    assert made.meta["frontier add"] == made.meta["frontier sub"] == 15  # greedy is right up to 14 digits
    tiers = {source: {R.slice_of(r["prompt"])[1] for r in made.rows if r["source"] == source}
             for source in ("practice", "rl", "self_label")}
    assert tiers == {"practice": {15, 16}, "rl": {15, 16}, "self_label": {13, 14}}  # the first unsure one and the next
    assert all(R.verify(r["prompt"], r["target"])[0] == 1 for r in made.rows if r["source"] != "rl")


def test_practice_goes_no_further_than_the_eval_suite_reaches():
    """Past the suite's top tier the gate sees only its few horizon slices, and the problems there cost the most:
    the frontier, practice and RL stop at the reach; a skill solved up to it gets no practice or RL, and self-labels
    at its top tier (no ground truth says the model's sure answers there are right: its checks do) and at its own
    edge past it."""
    from knowing_recipe import KnowsUpTo

    from rmi_pipeline.ml.curriculum import reach
    from rmi_pipeline.ml.practice import practise
    from rmi_pipeline.settings import Practice

    recipe = KnowsUpTo()  # greedy right up to 14 digits, reliable up to 12
    slices = [{"skill": "add", "tier": t} for t in range(1, 16)] + [{"skill": "sub", "tier": t} for t in range(1, 13)]
    last = reach(recipe, slices)
    assert last == {"add": 15, "sub": 12}
    made = practise(recipe, None, {"practice": 0.1, "rl": 0.1, "hint_distill": 0, "self_label": 0.1}, [],
                    random.Random(0), 0, practice=Practice(problems=50, tiers=2, failed_prompts=0),
                    sampling=Sampling(rollouts=4, temperature=1.0), self_labelling=labelling(problems=50),
                    saturation=0.9, reach=last)
    assert (made.meta["frontier add"], made.meta["frontier sub"]) == (15, 13)  # sub: solved up to its reach
    made_at = {source: {R.slice_of(r["prompt"]) for r in made.rows if r["source"] == source}
               for source in ("practice", "rl", "self_label")}
    assert made_at == {"practice": {("add", 15)}, "rl": {("add", 15)},
                       "self_label": {("add", 13), ("add", 14), ("sub", 11), ("sub", 12), ("sub", 13), ("sub", 14)}}
    # two tiers each (Practice.tiers): from the edge within the reach, and past sub's; nothing at add/16


def test_a_probe_far_from_its_threshold_is_decided_by_its_first_third_and_always_as_by_all_of_it():
    from rmi_pipeline.ml.curriculum import share_right

    def probe(items: list[bool], at: float) -> tuple[float, int]:
        asked: list[bool] = []
        return share_right(lambda part: asked.extend(part) or part, items, at), len(asked)

    assert probe([True] * 30, 0.25) == (1.0, 10)  # the suite's horizon: a tier the model still solves
    assert probe([False] * 30, 0.9) == (0.0, 10)  # the edge search: a tier far past the edge
    assert probe([True] * 26 + [False] * 4, 0.9)[1] == 30  # near the edge it takes all of them
    rng = random.Random(0)
    for _ in range(500):
        items, at = [rng.random() < rng.random() for _ in range(rng.randint(1, 40))], rng.choice([0.25, 0.5, 0.9])
        assert (probe(items, at)[0] >= at) == (sum(items) / len(items) >= at), (items, at)


def test_the_edge_of_a_long_reliable_range_is_found_in_a_few_probes():
    from rmi_pipeline.ml.curriculum import first_unsolved

    for edge in (1, 2, 5, 64, 65, 1000, 1001):
        asked: list[int] = []
        found = first_unsolved(lambda t, edge=edge, asked=asked: asked.append(t) or t < edge, 1, 1000)
        assert found == edge and len(asked) <= 2 * 10 + 1, (edge, asked)
    # to within 2% (the benchmark's long tiers): never past the edge, never short of it by more, in fewer probes
    for edge in (5, 64, 530, 999):
        asked, to_the_digit = [], []
        found = first_unsolved(lambda t, edge=edge, asked=asked: asked.append(t) or t < edge, 1, 1000, within=0.02)
        exact = first_unsolved(lambda t, edge=edge, asked=to_the_digit: asked.append(t) or t < edge, 1, 1000)
        assert edge - 0.02 * edge - 1 <= found <= edge == exact, (edge, found)
        # short edges are found to the digit all the same; long ones with 3-4 fewer of the longest probes
        assert len(asked) == len(to_the_digit) if edge < 100 else len(asked) <= len(to_the_digit) - 3, (edge, asked)
