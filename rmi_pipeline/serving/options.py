"""Which of an OpenAI request's options the gateway honours (as `Asked`, how the request wants its answers
decoded), and the 400 that names an option it refuses and why.

Refused: options whose answer this gateway cannot give (log probabilities, tools, echoing the prompt, penalties,
a response format other than text...), `n` past the request's share of a batch, and what the recipe cannot decode
with (Recipe.unsupported_decoding). Options that change nothing in an answer (metadata, store, service_tier...)
are accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..recipes.completion import Decoding
from .errors import Refused

# option -> (the values that ask nothing of the answer, why another is refused)
REFUSED = {
    "logprobs": ((None, False, 0), "this gateway returns no log probabilities"),
    "top_logprobs": ((None, 0), "this gateway returns no log probabilities"),
    "echo": ((None, False), "the prompt is not echoed into the answer"),
    "best_of": ((None, 1), "answers are not ranked server-side; ask for n answers instead"),
    "suffix": ((None, ""), "the models here write after a prompt, not into a gap"),
    "presence_penalty": ((None, 0, 0.0), "the recipes decode without penalties"),
    "frequency_penalty": ((None, 0, 0.0), "the recipes decode without penalties"),
    "logit_bias": ((None, {}), "the recipes decode without token biases"),
    "tools": ((None, []), "the models here call no tools"),
    "functions": ((None, []), "the models here call no functions"),
    "tool_choice": ((None, "none"), "the models here call no tools"),
    "function_call": ((None, "none"), "the models here call no functions"),
    "audio": ((None,), "answers are text only"),
    "modalities": ((None, ["text"]), "answers are text only"),
    "prediction": ((None,), "predicted outputs are not used"),
    "web_search_options": ((None,), "the models here do not search the web"),
}
TEXT_FORMATS = (None, {"type": "text"})  # response_format: a JSON mode would need decoding the recipes do not do


@dataclass(frozen=True)
class Asked:
    """How a request wants its answers decoded. `temperature` None leaves it to the gateway (greedy, but for the
    explored share); `seed` None lets the gateway draw one. Requests that ask alike share a forward pass."""

    temperature: float | None = None
    top_p: float = 1.0
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def decoding(self, temperature: float, seed: int) -> Decoding:
        """The recipe's Decoding, at `temperature` (0: greedy) with `seed` where the request set neither."""
        return Decoding(max_tokens=self.max_tokens, top_p=self.top_p, stop=self.stop,
                        temperature=temperature if self.temperature is None else self.temperature,
                        seed=seed if self.seed is None else self.seed)


PLAIN = Asked()  # /v1/answers, and an OpenAI request that sets no option


def asked(body, recipe, max_prompts: int, prompts: int) -> Asked:
    """What an OpenAI request (bodies.OpenAIRequest) asks, or Refused (400) naming the first option refused."""
    extra = body.model_extra or {}
    for name, (harmless, why) in REFUSED.items():
        if name in extra and extra[name] not in harmless:
            raise Refused(400, f"{name}: {why}", param=name, code="unsupported_option")
    if extra.get("response_format") not in TEXT_FORMATS:
        raise Refused(400, "response_format: answers are plain text (type 'text')", param="response_format",
                      code="unsupported_option")
    if prompts * body.n > max_prompts:
        raise Refused(400, f"n: {prompts} prompt(s) x n={body.n} answers is more than the {max_prompts} one request "
                      "may ask for (RMI_SERVE_MAX_PROMPTS)", param="n", code="too_many_answers")
    options = Asked(temperature=body.temperature, top_p=1.0 if body.top_p is None else body.top_p,
                    max_tokens=body.new_tokens, stop=body.stop_texts, seed=body.seed)
    why = recipe.unsupported_decoding(options.decoding(1.0, 0))  # as if sampled: the explored share may be
    if why:
        raise Refused(400, why, param=why.split(":", 1)[0], code="unsupported_option")
    return options
