"""The model half of a recipe for any Hugging Face causal LM: build, encode, decode, hint, checkpoint.

Subclass HFRecipe and write the task half (skills, tiers, the verifier...: recipes/words is a worked example).
The first model comes from RMI_HF_MODEL (a local directory of `save_pretrained`, or a hub id where the machine can
reach a hub), else from the subclass's `base_model` (a small local model). Later versions carry everything in
their checkpoint: a tar of `save_pretrained` folders (weights in safetensors, the tokenizer, LoRA adapters apart
when they are not merged), loaded back with `use_safetensors=True` and no remote code, so nothing is unpickled.
"""

from __future__ import annotations

import copy
import io
import tarfile
import tempfile
from abc import abstractmethod
from importlib.util import find_spec
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..base import Recipe

MODEL_DIR, ADAPTER_DIR = "model", "adapter"
HF_EXTRA = ("transformers", "tokenizers", "safetensors", "peft")  # pyproject.toml's extra `hf`


class HFOptions(BaseSettings):
    """The recipe's own settings (RMI_HF_*): only the first model reads them; a checkpoint carries its own."""

    model_config = SettingsConfigDict(env_prefix="RMI_HF_", extra="ignore")

    model: str | None = Field(default=None, description="The first model: a save_pretrained directory or a hub id; "
                              "unset: the recipe's own small local model.")
    lora_r: int = Field(default=0, ge=0, description="LoRA rank (peft); 0 trains every weight.")
    lora_alpha: float = Field(default=16.0, description="LoRA scaling numerator.")
    lora_dropout: float = Field(default=0.0, ge=0, lt=1, description="Dropout on the LoRA path.")
    lora_targets: str = Field(default="all-linear", description="Modules LoRA adapts: 'all-linear' or a comma list.")
    lora_merge: bool = Field(default=False, description="Merge the adapters into the weights in each checkpoint "
                             "(the next candidate starts fresh adapters on them); else they are kept apart.")


class HFRecipe(Recipe):
    text_recipe = True
    max_answer_tokens: int = 32  # new tokens a completion may take
    client_tokens_factor: int = 8  # a client's max_tokens may ask for this many times as many (a bound on a pass)
    generate_batch: int = 64  # prompts per generate call

    def __init__(self):
        missing = [name for name in HF_EXTRA if find_spec(name) is None]
        if missing:  # RuntimeError: the CLI says it in one line
            raise RuntimeError(f"the Hugging Face recipes need the hf extra ({', '.join(missing)} not installed): "
                               "pip install 'rmi-pipeline[hf]'")
        self.options = HFOptions()

    @abstractmethod
    def base_model(self, size: str, path: Path) -> None:
        """Write a small local model and its tokenizer (`save_pretrained`) into `path`: the first model when
        RMI_HF_MODEL is unset."""

    # ---- the model ----
    def build_model(self, learning_rate, max_steps, size="tiny", config=None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        _quiet()
        if config is not None:
            raise ValueError("an HFRecipe rebuilds models from checkpoints (load_checkpoint), not from a config")
        with tempfile.TemporaryDirectory() as tmp:
            # a size that names a save_pretrained directory is that model (a new generation a team brings), else the
            # first model is RMI_HF_MODEL or the recipe's own of that size
            source = size if Path(size).expanduser().is_dir() else self.options.model
            if source is None:
                self.base_model(size, Path(tmp))
                source = tmp
            tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, use_safetensors=True)
        return self._module(self._with_lora(model), tokenizer, learning_rate, max_steps)

    def checkpoint(self, module) -> bytes:
        from peft import PeftModel

        model, buffer = module.model, io.BytesIO()
        with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=buffer, mode="w") as tar:
            root = Path(tmp)
            if isinstance(model, PeftModel):
                if self.options.lora_merge:
                    copy.deepcopy(model).merge_and_unload().save_pretrained(root / MODEL_DIR)
                else:
                    model.save_pretrained(root / ADAPTER_DIR)
                    copy.deepcopy(model).unload().save_pretrained(root / MODEL_DIR)
            else:
                model.save_pretrained(root / MODEL_DIR)
            module.tokenizer.save_pretrained(root / MODEL_DIR)
            for path in sorted(root.rglob("*")):
                if path.is_file():
                    tar.add(path, arcname=str(path.relative_to(root)))
        return buffer.getvalue()

    def load_checkpoint(self, data, learning_rate=0.0, max_steps=1):
        return self._module(*self._pretrained(data, trainable=learning_rate > 0), learning_rate, max_steps)

    def load_model(self, data):
        from .answering import Answering

        model, tokenizer = self._pretrained(data, trainable=False)
        return Answering(model, _padded(tokenizer)).eval()

    def _pretrained(self, data: bytes, trainable: bool):
        """(model, tokenizer) of a checkpoint's folders; LoRA adapters on it when it has them or `trainable`."""
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        _quiet()
        with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")  # plain files under tmp only
            root = Path(tmp)
            tokenizer = AutoTokenizer.from_pretrained(root / MODEL_DIR)
            model = AutoModelForCausalLM.from_pretrained(root / MODEL_DIR, use_safetensors=True)
            if (root / ADAPTER_DIR).exists():
                model = PeftModel.from_pretrained(model, root / ADAPTER_DIR, is_trainable=trainable)
            elif trainable:  # merged adapters, or none yet: fresh ones if LoRA is on
                model = self._with_lora(model)
        return model, tokenizer

    def _with_lora(self, model):
        o = self.options
        if not o.lora_r:
            return model
        from peft import LoraConfig, get_peft_model

        targets = o.lora_targets if o.lora_targets == "all-linear" else [t.strip() for t in o.lora_targets.split(",")]
        return get_peft_model(model, LoraConfig(r=o.lora_r, lora_alpha=o.lora_alpha, lora_dropout=o.lora_dropout,
                                                target_modules=targets, task_type="CAUSAL_LM"))

    @staticmethod
    def _module(model, tokenizer, learning_rate, max_steps):
        from .model import LitCausalLM

        return LitCausalLM(model, _padded(tokenizer), learning_rate=learning_rate, max_steps=max_steps)

    # ---- text in and out ----
    def model_input(self, tokenizer, prompt: str) -> str:
        """The text the model continues: the chat template's user turn where the tokenizer has one (a chat the
        template rendered already, as the gateway records one, as it is: hf/chat.py), else the prompt and a
        newline."""
        from .chat import rendered

        if tokenizer.chat_template:
            if rendered(tokenizer, prompt):
                return prompt
            return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                 add_generation_prompt=True)
        return prompt + "\n"

    def chat_prompt(self, model, messages):
        from .chat import render

        return render(model.tokenizer, messages)

    def encode(self, module, prompts, completions):
        import torch

        tokenizer = module.tokenizer
        heads = tokenizer([self.model_input(tokenizer, p) for p in prompts], add_special_tokens=False)["input_ids"]
        tails = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
        rows = [h + t + [tokenizer.eos_token_id] for h, t in zip(heads, tails, strict=True)]
        width = max((len(r) for r in rows), default=1)
        dtype = torch.int16 if len(tokenizer) < 2**15 else torch.int32
        ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=dtype)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, (head, row) in enumerate(zip(heads, rows, strict=True)):
            ids[i, :len(row)] = torch.tensor(row, dtype=dtype)
            mask[i, len(head):len(row)] = True  # the completion and its end token
        return ids, mask

    def answer(self, model, prompts):
        return self._generate(model, prompts)

    def sample(self, model, prompts, k, temperature, seed):
        flat = self._generate(model, [p for p in prompts for _ in range(k)], temperature=temperature, seed=seed)
        return [flat[i * k:(i + 1) * k] for i in range(len(prompts))]

    def complete(self, model, prompts, decoding):
        from .answering import generate

        return generate(model, [self.model_input(model.tokenizer, p) for p in prompts], decoding,
                        decoding.max_tokens or self.max_answer_tokens, self.generate_batch)

    def unsupported_decoding(self, decoding):
        # generate samples with top_p and stops at stop texts; a model that never ends an answer would decode as
        # many tokens as asked, holding the batch behind it
        most = self.client_tokens_factor * self.max_answer_tokens
        if decoding.max_tokens is not None and decoding.max_tokens > most:
            return f"max_tokens: the {self.name} recipe decodes at most {most} new tokens in one answer"
        return None

    def prompt_tokens(self, model, prompts):
        tokenizer = model.tokenizer
        return [len(ids) for ids in tokenizer([self.model_input(tokenizer, p) for p in prompts],
                                              add_special_tokens=False)["input_ids"]]

    def pieces(self, model, text):
        # the tokenizer's tokens as spans of the text (a character split across byte-level tokens stays whole)
        if not text:
            return []
        try:
            spans = model.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        except NotImplementedError:  # a slow (Python) tokenizer has no offsets: characters then
            return list(text)
        ends = sorted({end for _, end in spans if 0 < end < len(text)})
        return [text[a:b] for a, b in zip([0, *ends], [*ends, len(text)], strict=True)]

    def hidden_states(self, module, tokens):
        return module.model(input_ids=tokens, output_hidden_states=True).hidden_states[-1]

    def hint(self, prompt, critique):
        return f"{prompt}\nHint: {critique}"

    def _generate(self, module, prompts, temperature: float = 0.0, seed: int = 0) -> list[str]:
        from ..completion import Decoding

        return [c.text for c in self.complete(module, prompts, Decoding(temperature=temperature, seed=seed))]


def _padded(tokenizer):
    if tokenizer.pad_token is None:  # many causal LMs ship without one; padding is always masked out
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _quiet() -> None:
    """No progress bar per checkpoint written or read, no advice per model loaded: they fill a run's log."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
