"""OpenAI's reply shapes, made from the gateway's recorded answers: a completion, a chat completion, their stream
chunks, and the usage in the recipe's tokens.

`id` is the first choice's response id, which POST /v1/feedback takes; every choice also carries its own
`response_id` (each is an answer of its own, rated on its own) and the `model_version` that wrote it.
"""

from __future__ import annotations

from collections.abc import Iterator


def usage(answers: list[dict], n: int) -> dict:
    """Tokens read and written, in the recipe's tokens; a prompt answered n times is read once (as OpenAI counts)."""
    read = sum(a["prompt_tokens"] for a in answers[::n])
    written = sum(a["tokens"] for a in answers)
    return {"prompt_tokens": read, "completion_tokens": written, "total_tokens": read + written}


def _mine(answer: dict) -> dict:
    return {"response_id": answer["response_id"], "model_version": answer["model_version"]}


def completion(answers: list[dict], model: str, n: int, created: int) -> dict:
    return {"id": answers[0]["response_id"], "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": i, "text": a["completion"], "logprobs": None, "finish_reason": a["finish_reason"],
                         **_mine(a)} for i, a in enumerate(answers)],
            "usage": usage(answers, n)}


def chat_completion(answers: list[dict], model: str, n: int, created: int) -> dict:
    return {"id": answers[0]["response_id"], "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": i, "message": {"role": "assistant", "content": a["completion"], "refusal": None},
                         "logprobs": None, "finish_reason": a["finish_reason"], **_mine(a)}
                        for i, a in enumerate(answers)],
            "usage": usage(answers, n)}


def completion_chunks(answers: list[dict], pieces: list[list[str]], model: str, n: int, created: int,
                      include_usage: bool) -> Iterator[dict]:
    """Each choice's text a token a chunk, then a chunk with its finish reason; with include_usage, a last chunk
    with no choices and the usage (and every chunk before it says usage null)."""
    head = {"id": answers[0]["response_id"], "object": "text_completion", "created": created, "model": model,
            **({"usage": None} if include_usage else {})}
    for i, (answer, parts) in enumerate(zip(answers, pieces, strict=True)):
        for part in parts:
            yield {**head, "choices": [{"index": i, "text": part, "logprobs": None, "finish_reason": None,
                                        **_mine(answer)}]}
        yield {**head, "choices": [{"index": i, "text": "", "logprobs": None,
                                    "finish_reason": answer["finish_reason"], **_mine(answer)}]}
    if include_usage:
        yield {**head, "choices": [], "usage": usage(answers, n)}


def chat_chunks(answers: list[dict], pieces: list[list[str]], model: str, n: int, created: int,
                include_usage: bool) -> Iterator[dict]:
    """Per choice: a chunk with the assistant's role, its text a token a chunk, then one with its finish reason;
    with include_usage, a last chunk with no choices and the usage."""
    head = {"id": answers[0]["response_id"], "object": "chat.completion.chunk", "created": created, "model": model,
            **({"usage": None} if include_usage else {})}

    def chunk(i: int, delta: dict, answer: dict, finish: str | None = None) -> dict:
        return {**head, "choices": [{"index": i, "delta": delta, "logprobs": None, "finish_reason": finish,
                                     **_mine(answer)}]}

    for i, (answer, parts) in enumerate(zip(answers, pieces, strict=True)):
        yield chunk(i, {"role": "assistant", "content": ""}, answer)
        for part in parts:
            yield chunk(i, {"content": part}, answer)
        yield chunk(i, {}, answer, answer["finish_reason"])
    if include_usage:
        yield {**head, "choices": [], "usage": usage(answers, n)}


def model_list(models: list[dict]) -> dict:
    return {"object": "list", "data": models}
