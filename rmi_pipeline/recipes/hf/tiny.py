"""A small randomly initialised causal LM with a tokenizer trained on a task's own text, saved like any hub model.

Nothing is downloaded: the tokenizer is a byte-level BPE trained with `tokenizers`, the model is built with
`from_config`, and both are written with `save_pretrained`, so the recipe loads it exactly as it would load a model
a team brings (RMI_HF_MODEL).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

END = "<|endoftext|>"


def write_tiny_model(path: Path, texts: Iterable[str], *, vocab_size: int, architecture: dict, seed: int = 0,
                     chat_template: str | None = None) -> None:
    """A Llama-architecture model (`architecture`: LlamaConfig fields) and its tokenizer, into `path`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=END, bos_token=END, pad_token=END)
    if chat_template:
        tokenizer.chat_template = chat_template
    end = tokenizer.convert_tokens_to_ids(END)
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=end, eos_token_id=end, pad_token_id=end,
                         tie_word_embeddings=True, **architecture)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
