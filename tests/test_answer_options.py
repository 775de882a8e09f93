"""Answers as clients ask for them, in the recipe contract (recipes/completion.py): every recipe decodes with
max_tokens, stop texts, a temperature, top_p and a seed, counts tokens its own way and renders a chat as a prompt;
a recipe that writes none of it gets defaults that work; and the registered MLflow model takes prompts as a list, a
string or a DataFrame. Untrained models: the rules, not the answers, are under test."""

import pandas as pd
import pytest
import torch

from rmi_pipeline.ml import checkpoint
from rmi_pipeline.recipes.arithmetic import ArithmeticRecipe, tokens
from rmi_pipeline.recipes.arithmetic.gpt import GPT, GPTConfig
from rmi_pipeline.recipes.base import Recipe
from rmi_pipeline.recipes.completion import LENGTH, STOP, Decoding

R = ArithmeticRecipe()
PROMPTS = ["5+123=", "12+34=", "907-98=", "hello"]
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
            "{% if add_generation_prompt %}<bot>{% endif %}")


@pytest.fixture(scope="module")
def arithmetic():
    """A fresh tiny arithmetic model, as the gateway loads one (no Lightning)."""
    config = {"vocab_size": len(tokens.VOCAB), **R.sizes["tiny"]}
    torch.manual_seed(0)
    return R.load_model(checkpoint.dumps(config, GPT(GPTConfig(**config)).state_dict()))


def test_the_arithmetic_model_decodes_with_a_client_s_options(arithmetic):
    """Greedy with the defaults it answers as `answer`; max_tokens cuts the decoding (LENGTH), a stop text the
    answer (STOP); tokens are the model's (width + 1 answer tokens, none for a prompt it cannot read); a seed
    repeats a sample, and top_p near 0 samples only the most likely token: the greedy answer. An answer the
    client's max_tokens or stop text ended is marked cut, and only such an answer."""
    plain = R.complete(arithmetic, PROMPTS, Decoding())
    assert [c.text for c in plain] == R.answer(arithmetic, PROMPTS)
    assert [(c.tokens, c.finish_reason) for c in plain] == [(4, STOP), (3, STOP), (4, STOP), (0, STOP)]
    assert R.prompt_tokens(arithmetic, PROMPTS) == [8, 6, 8, 0]

    cut = R.complete(arithmetic, PROMPTS[:3], Decoding(max_tokens=2))
    assert [(c.tokens, c.finish_reason, c.cut) for c in cut] == [(2, LENGTH, True)] * 3
    assert not any(c.cut for c in plain)
    assert R.complete(arithmetic, ["12+34="], Decoding(max_tokens=3)) == plain[1:2]  # room for all of it

    whole = plain[0].text
    stop = whole[1]
    stopped = R.complete(arithmetic, PROMPTS[:1], Decoding(stop=("zz", stop)))[0]
    assert (stopped.text, stopped.finish_reason, stopped.cut) == (whole[:whole.index(stop)], STOP, True)
    assert not R.complete(arithmetic, PROMPTS[:1], Decoding(stop=("zz",)))[0].cut  # a stop text not met

    sampled = [R.complete(arithmetic, PROMPTS * 4, Decoding(temperature=2.0, seed=5)) for _ in range(2)]
    assert sampled[0] == sampled[1] and [c.text for c in sampled[0]] != R.answer(arithmetic, PROMPTS * 4)
    assert R.complete(arithmetic, PROMPTS, Decoding(temperature=2.0, top_p=1e-6, seed=5)) == plain
    assert R.unsupported_decoding(Decoding(temperature=1.0, top_p=0.5)) is None


class Echo(Recipe):
    """A recipe that is only a model and writes none of the client-facing methods: its answer is fixed."""

    name = "echo"

    def build_model(self, learning_rate, max_steps, size="tiny", config=None):
        return None

    def encode(self, module, prompts, completions):
        raise NotImplementedError

    def answer(self, model, prompts):
        return ["hello world" for _ in prompts]

    def sample(self, model, prompts, k, temperature, seed):
        return [[f"sampled {seed}"] * k for _ in prompts]

    def is_valid_prompt(self, prompt):
        return True

    def is_valid_completion(self, completion):
        return True

    def canonical(self, prompt):
        return prompt


def test_a_recipe_that_writes_none_of_it_gets_defaults_in_characters():
    """Whole answers cut after decoding, in characters; the chat's last message (the user's) is the prompt; top_p
    is refused by name, since the default samples from the whole distribution."""
    echo = Echo()
    one = echo.complete(None, ["q"], Decoding())[0]
    assert (one.text, one.tokens, one.finish_reason, one.cut) == ("hello world", 11, STOP, False)
    cut = echo.complete(None, ["q"], Decoding(max_tokens=3))[0]
    assert (cut.text, cut.tokens, cut.finish_reason, cut.cut) == ("hel", 3, LENGTH, True)
    assert not echo.complete(None, ["q"], Decoding(max_tokens=11))[0].cut
    stopped = echo.complete(None, ["q"], Decoding(stop=(" w",)))[0]
    assert (stopped.text, stopped.tokens, stopped.finish_reason, stopped.cut) == ("hello", 6, STOP, True)
    assert echo.complete(None, ["q"], Decoding(temperature=1.0, seed=4))[0].text == "sampled 4"
    assert echo.prompt_tokens(None, ["abc", ""]) == [3, 0] and echo.pieces(None, "ab") == ["a", "b"]
    assert echo.unsupported_decoding(Decoding(temperature=1.0, top_p=0.5)).startswith("top_p:")
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    assert echo.chat_prompt(None, chat) == "Hi?"
    with pytest.raises(ValueError, match="last message must be the user's"):
        echo.chat_prompt(None, [*chat, {"role": "assistant", "content": "Hello."}])


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    """A tiny Llama whose tokenizer has a chat template, loaded as the gateway loads one (no Lightning)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rmi_pipeline.recipes.hf.answering import Answering
    from rmi_pipeline.recipes.hf.recipe import _padded
    from rmi_pipeline.recipes.hf.tiny import write_tiny_model

    path = tmp_path_factory.mktemp("hf")
    lines = [f"Reverse the words: {a} {b}\n{b} {a}" for a in ("owl", "cat", "yak") for b in ("ant", "bee")] * 4
    write_tiny_model(path, lines, vocab_size=300, chat_template=TEMPLATE, architecture={
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 2, "max_position_embeddings": 128})
    return Answering(AutoModelForCausalLM.from_pretrained(path), _padded(AutoTokenizer.from_pretrained(path))).eval()


def test_a_hugging_face_model_decodes_counts_and_renders_chats_with_its_template(hf_model):
    """Greedy with the defaults it answers as `answer`; max_tokens=1 decodes one token; a stop text ends the
    answer before it; tokens and streamed pieces are the tokenizer's; a chat of one user message is that message,
    a longer one the template's rendering, which the model then reads as it is (not wrapped again)."""
    from rmi_pipeline.recipes.hf.text import TextRecipe

    class Short(TextRecipe):
        max_answer_tokens = 12

    recipe = Short()
    prompts = ["Reverse the words: owl ant", "cat bee"]
    plain = recipe.complete(hf_model, prompts, Decoding())
    assert [c.text for c in plain] == recipe.answer(hf_model, prompts)
    # untrained: its own limit ends every answer, which is then whole, not cut
    assert all(c.finish_reason == LENGTH and c.tokens == recipe.max_answer_tokens and not c.cut for c in plain)
    one = recipe.complete(hf_model, prompts, Decoding(max_tokens=1))
    assert [(c.tokens, c.finish_reason, c.cut) for c in one] == [(1, LENGTH, True)] * 2
    text = plain[0].text
    stop = text[len(text) // 2:][:2]
    stopped = recipe.complete(hf_model, prompts[:1], Decoding(stop=(stop,)))[0]
    assert stopped.finish_reason == STOP and stopped.cut and stop not in stopped.text
    assert stopped.tokens < plain[0].tokens
    words = "Reverse the words: owl ant"  # the tokenizer learned these words: fewer tokens than characters
    assert "".join(recipe.pieces(hf_model, words)) == words and 1 < len(recipe.pieces(hf_model, words)) < len(words)
    tokenizer = hf_model.tokenizer
    assert recipe.prompt_tokens(hf_model, prompts[:1]) == [
        len(tokenizer("<user>Reverse the words: owl ant</user><bot>", add_special_tokens=False)["input_ids"])]
    sampled = [recipe.complete(hf_model, prompts, Decoding(temperature=1.0, top_p=0.9, seed=2)) for _ in range(2)]
    assert sampled[0] == sampled[1] and recipe.unsupported_decoding(Decoding(top_p=0.5, max_tokens=96)) is None
    assert recipe.unsupported_decoding(Decoding(max_tokens=97)).startswith("max_tokens:")  # 8 x its 12

    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "cat bee"}]
    assert recipe.chat_prompt(hf_model, chat[1:]) == "cat bee"
    rendered = recipe.chat_prompt(hf_model, chat)
    assert rendered == "<system>Be brief.</system><user>cat bee</user><bot>"
    assert recipe.model_input(tokenizer, rendered) == rendered
    assert recipe.model_input(tokenizer, "cat bee") == "<user>cat bee</user><bot>"
    with pytest.raises(ValueError, match="last message must be the user's"):
        recipe.chat_prompt(hf_model, [*chat, {"role": "assistant", "content": "bee cat"}])
    tokenizer.chat_template = None
    try:  # without a template the model reads one question at a time
        assert recipe.chat_prompt(hf_model, chat) == "cat bee"
    finally:
        tokenizer.chat_template = TEMPLATE


def test_the_registered_mlflow_model_takes_a_list_a_string_or_a_dataframe(arithmetic, tmp_path):
    import mlflow

    from rmi_pipeline.recipes import pyfunc
    from rmi_pipeline.settings import DEFAULT_RECIPE

    config = {"vocab_size": len(tokens.VOCAB), **R.sizes["tiny"]}
    torch.manual_seed(0)
    pyfunc.save(tmp_path / "model", DEFAULT_RECIPE, checkpoint.dumps(config, GPT(GPTConfig(**config)).state_dict()))
    model = mlflow.pyfunc.load_model(str(tmp_path / "model"))
    want = R.answer(arithmetic, ["12+34=", "5+123="])
    for given in (["12+34=", "5+123="], pd.DataFrame({"prompt": ["12+34=", "5+123="]}), {"prompt": ["12+34=",
                                                                                                   "5+123="]}):
        assert list(model.predict(given)["completion"]) == want, given
    assert list(model.predict("12+34=")["completion"]) == want[:1]
