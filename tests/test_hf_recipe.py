"""The Hugging Face recipe and its text tasks: critiques in words, hints, LoRA checkpoints, the chat template,
token-level self-distillation."""

import random

import pytest
import torch

from rmi_pipeline.ml.objective import batch_loss, kl_to_teacher, taught_by_teacher, trimmed
from rmi_pipeline.ml.rl import first_mistake
from rmi_pipeline.ml.train import fit
from rmi_pipeline.recipes.words import WordsRecipe

R = WordsRecipe()


@pytest.fixture(scope="module")
def trained():
    """A tiny words model that has seen the seed set for a little while (answers are mostly still wrong)."""
    module = R.build_model(3e-3, 60)
    seed = R.seed_tasks(random.Random(0))[:2000]
    fit(module, *R.encode(module, [t.prompt for t in seed], [t.answer for t in seed]), max_steps=60,
        max_seconds=120, batch_size=32)
    return module


def test_the_verifier_says_in_words_what_to_fix():
    prompt = "Reverse the words: owl cat yak"
    assert R.verify(prompt, "yak cat owl") == (1.0, "Correct.")
    assert R.verify(prompt, "yak owl cat") == (0.0, "The second word should be cat, not owl. "
                                                     "The third word should be owl, not cat.")
    assert R.verify(prompt, "yak cat") == (0.0, "The answer has 2 words; it should have 3. "
                                                "The third word should be owl.")
    assert R.verify(prompt, "yak emu cat owl") == (0.0, "The answer has 4 words; it should have 3. "
                                                        "The second word should be cat.")
    assert R.verify(prompt, "yak, cat, owl")[0] == 0.0
    assert R.verify("Put these words in alphabetical order: owl cat", "cat owl")[0] == 1.0  # another phrasing
    assert R.slice_of(R.hint(prompt, "The second word should be cat, not owl.")) == ("reverse", 2)


def test_a_problem_is_the_same_however_it_is_asked_and_prompts_are_untrusted_text():
    assert R.canonical("Sort: owl cat") == R.canonical("Sort the words: cat owl")  # the same sorting problem
    assert R.canonical("Reverse: owl cat") != R.canonical("Reverse: cat owl")
    for bad in ("Reverse the words: owl", "Reverse the words: owl cat\n", "Shout: owl cat", "Sort: owl Cat",
                "Sort: " + " ".join(["owl"] * 9), "Sort: owl cat\nHint:"):
        assert not R.is_valid_prompt(bad), bad
    assert R.plausible("Sort: owl cat", "cat owl") and not R.plausible("Sort: owl cat", "cat cat")
    variant = R.variant(R.sample_tasks(random.Random(0), 1, ["reverse"], [5])[0], random.Random(1))
    assert variant.skill == "sort" and R.verify(variant.prompt, variant.answer)[0] == 1


def test_the_seed_set_teaches_reading_hints_on_its_own_tiers():
    seed = R.seed_tasks(random.Random(0))
    hinted = [t for t in seed if "\nHint: " in t.prompt]
    assert 0.2 < len(hinted) / len(seed) < 0.3 and {t.tier for t in seed} == {1, 2, 3}
    for task in hinted[:200]:  # the target is the right answer, whatever mistake the hint is about
        assert R.verify(task.prompt, task.answer)[0] == 1


def test_rows_of_any_length_pad_on_the_right_and_rl_cuts_at_the_first_wrong_token(trained):
    prompts = ["Reverse the words: owl cat", "Sort: wolf bee ant emu yak fox"]
    tokens, mask = R.encode(trained, prompts, ["cat owl", "ant bee emu fox wolf yak"])
    assert tokens.dtype == torch.int16 and mask[0].sum() < mask[1].sum()
    assert tokens[0, mask[0].nonzero().max() + 1:].eq(trained.tokenizer.pad_token_id).all()
    reference, _ = R.encode(trained, prompts[:1], ["cat owl"])
    for answer in ("cat cat", "cat owl owl owl"):  # as long as the right answer, and longer
        wrong, wrong_mask = R.encode(trained, prompts[:1], [answer])
        cut = first_mistake(wrong, wrong_mask, reference)
        at = cut[0].nonzero().item()
        assert cut.sum() == 1 and wrong_mask[0, at] and torch.equal(wrong[0, :at], reference[0, :at])
        assert wrong[0, at] != (reference[0, at] if at < reference.shape[1] else -1)


def test_a_batch_is_cut_to_its_longest_row_and_its_loss_stays_the_same(trained):
    hinted = R.hint("Sort: owl cat", "The first word should be cat, not owl. The second word should be owl, not cat.")
    tokens, mask = R.encode(trained, ["Sort: owl cat", hinted], ["cat owl", "cat owl"])
    short = [tokens[:1], mask[:1]]  # a batch of the short row, padded to the long one as in a dataset
    cut = trimmed(short)
    assert cut[0].shape[1] == mask[0].nonzero().max() + 1 < tokens.shape[1]
    with torch.no_grad():
        full_loss = batch_loss(trained(short[0].long()[:, :-1]), short)[0]
        cut_loss = batch_loss(trained(cut[0].long()[:, :-1]), cut)[0]
    assert torch.allclose(full_loss, cut_loss, atol=1e-5)


def test_kl_to_the_teacher_is_zero_at_the_teacher_and_pulls_toward_it():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7, requires_grad=True)
    mask = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 1, 1]], dtype=torch.bool)
    teacher = torch.log_softmax(torch.randn(1, 4, 7), -1)
    same = torch.zeros(2, 5, 7)
    same[1, 1:5] = teacher[0]  # row 1's answer positions hold the teacher's distributions
    rows = torch.tensor([-1, 0])
    assert kl_to_teacher(same, mask, rows, teacher).abs() < 1e-5
    loss = kl_to_teacher(logits, mask, rows, teacher)
    loss.backward()
    assert loss > 0 and logits.grad[0].abs().sum() == 0 and logits.grad[1, 1:].abs().sum() > 0


def test_token_distillation_teaches_the_plain_prompt_what_the_hinted_one_knows(trained):
    prompt, answer = "Reverse the words: owl cat yak", "yak cat owl"
    hinted = R.hint(prompt, "The first word should be yak, not owl.")
    rows = taught_by_teacher(R, trained, [None, hinted], ["x", answer])
    assert rows.tolist() == [-1, 0] and trained.teacher.shape[0] == 1
    tokens, mask = R.encode(trained, [prompt], [answer])

    def gap() -> float:
        with torch.no_grad():
            plain = torch.log_softmax(trained(tokens.long()[:, :-1]).float(), -1)
        return float(kl_to_teacher(plain, mask[:, 1:], torch.tensor([0]), trained.teacher))

    before = gap()
    assert before > 0  # the hint changes what the model predicts: there is something to distil
    fit(trained, tokens, mask, max_steps=20, max_seconds=60, batch_size=4, scales=torch.zeros(1),
        teacher_rows=torch.tensor([0]))  # the row teaches through its teacher only
    assert gap() < before / 2


@pytest.mark.parametrize("merge", [False, True])
def test_lora_trains_only_adapters_and_its_checkpoint_answers_the_same(monkeypatch, merge):
    monkeypatch.setenv("RMI_HF_LORA_R", "4")
    monkeypatch.setenv("RMI_HF_LORA_MERGE", str(merge).lower())
    recipe = WordsRecipe()
    module = recipe.build_model(1e-2, 20)
    trainable = {n for n, p in module.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    frozen = {n: p.detach().clone() for n, p in module.named_parameters() if not p.requires_grad}
    seed = recipe.seed_tasks(random.Random(0))[:256]
    fit(module, *recipe.encode(module, [t.prompt for t in seed], [t.answer for t in seed]), max_steps=20,
        max_seconds=60, batch_size=16)
    assert all(torch.equal(p, frozen[n]) for n, p in module.named_parameters() if n in frozen)
    data = recipe.checkpoint(module)
    again = recipe.load_checkpoint(data)
    prompts = [t.prompt for t in seed[:12]]
    assert recipe.answer(again, prompts) == recipe.answer(module, prompts)
    assert (type(again.model).__name__ == "PeftModelForCausalLM") is not merge
    warm = recipe.load_checkpoint(data, learning_rate=1e-3, max_steps=2)  # adapters again, on the merged weights
    assert any("lora_" in n for n, p in warm.named_parameters() if p.requires_grad)


def test_a_tokenizer_with_a_chat_template_gets_its_user_turn(trained):
    tokenizer = trained.tokenizer
    tokenizer.chat_template = "{% for m in messages %}<user>{{ m['content'] }}</user>{% endfor %}<bot>"
    try:
        assert R.model_input(tokenizer, "Sort: owl cat") == "<user>Sort: owl cat</user><bot>"
        tokens, mask = R.encode(trained, ["Sort: owl cat"], ["cat owl"])
        head = tokenizer.decode(tokens[0][~mask[0]].tolist()[:len(tokenizer("<user>Sort: owl cat</user><bot>")
                                                                           ["input_ids"])])
        assert head == "<user>Sort: owl cat</user><bot>"
    finally:
        tokenizer.chat_template = None
