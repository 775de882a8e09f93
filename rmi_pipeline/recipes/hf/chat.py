"""A chat's messages as a Hugging Face model reads them: rendered by its tokenizer's chat template.

A chat of one user message is that message: HFRecipe.model_input puts a prompt in the template's user turn, which
renders the same text. Any other chat (a system message, earlier turns) is the template's rendering of all of it,
and that rendering is the prompt the feedback log records and training reads; model_input knows such a prompt by
the template's frame (what every rendering starts and ends with) and does not wrap it again. A template whose
renderings share no frame cannot tell them from questions: it takes chats of one user message only.
"""

from __future__ import annotations

import os
from functools import lru_cache

from ..completion import plain_prompt

# conversations whose renderings show the template's frame: what all of them start and end with
SAMPLES = ([{"role": "user", "content": "a"}],
           [{"role": "system", "content": "s"}, {"role": "user", "content": "b"}],
           [{"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}])


def render(tokenizer, messages: list[dict]) -> str:
    """The prompt of a chat (ValueError, saying why, where it cannot be one)."""
    question = plain_prompt(messages)  # a chat ends with the user's question, with a template or without
    if len(messages) == 1 or not tokenizer.chat_template:
        return question  # without a template the model reads one question at a time (completion.plain_prompt)
    if not all(frame(tokenizer)):
        raise ValueError("this model's chat template renders no fixed frame around a conversation, so a rendered "
                         "one could not be told from a question: send the question as the only message")
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - the template's own refusal (a role it has no turn for)
        raise ValueError(f"the model's chat template cannot render these messages: {str(exc)[:200]}") from None


def rendered(tokenizer, prompt: str) -> bool:
    """Whether `prompt` is a chat the tokenizer's template rendered (begins and ends as every rendering does)."""
    head, tail = frame(tokenizer)
    return bool(head and tail) and len(prompt) >= len(head) + len(tail) and prompt.startswith(head) \
        and prompt.endswith(tail)


def frame(tokenizer) -> tuple[str, str]:
    """What every rendering of the tokenizer's template starts and ends with ("", "" without a template)."""
    return _frame(tokenizer.chat_template or "", tokenizer) if tokenizer.chat_template else ("", "")


@lru_cache(maxsize=8)
def _frame(template: str, tokenizer) -> tuple[str, str]:
    texts = []
    for messages in SAMPLES:
        try:
            texts.append(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        except Exception:  # noqa: BLE001, S112 - a template without a system turn: the others still frame it
            continue
    if len(texts) < 2:
        return "", ""
    return os.path.commonprefix(texts), os.path.commonprefix([t[::-1] for t in texts])[::-1]
