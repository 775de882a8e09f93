"""The JSON bodies the gateway accepts: validated here, so a route only ever sees a well-formed request."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

OPENAI_USER = "openai-client"  # who asks when an OpenAI client names no `user`


def _integral(value):
    """A JSON number with no fraction (2.0) is an integer, as JSON Schema counts; strict models take no other
    stand-ins (no "2", no true), as the OpenAPI document says."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(_integral)]
Positive = Annotated[int, Field(ge=1), BeforeValidator(_integral)]  # the bound first, or the schema misses it


class AnswersRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    prompts: list[str] = Field(min_length=1, description="Questions for the model, answered in order.")
    user_id: str = Field(min_length=1, max_length=200, description="Who asks: stored with each answer.")


SPACE = " \t\n\r\f\v"  # what a blank signal is made of (str.strip's default is wider than JSON Schema's \s)


class FeedbackRequest(BaseModel):
    # rated, or with meta.signal: the rule of rated_or_signalled, in the OpenAPI document too
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"anyOf": [
        {"properties": {"rating": {"enum": ["up", "down"]}}, "required": ["rating"]},
        {"properties": {"meta": {"properties": {"signal": {"type": "string", "pattern": "[^ \\t\\n\\r\\f\\v]"}},
                                 "required": ["signal"]}}, "required": ["meta"]}]})
    response_id: str = Field(min_length=1, max_length=100, description="From the answer the feedback is about.")
    rating: Literal["up", "down"] | None = Field(default=None, description="null: an implicit signal, which "
                                                 "meta.signal names (asked_again, copied).")
    correction: str | None = Field(default=None, description="The answer that would have been right.")
    comment: str | None = None
    source: Literal["user", "report"] = Field(default="user", description="report: an automated check.")
    user_id: str | None = Field(default=None, max_length=200, description="Who reacts; default who asked.")
    skill: str | None = Field(default=None, min_length=1, max_length=100, description="The kind of question, as "
                              "your app names it (a topic, a product): the slice of the live thumbs-down rates; "
                              "default the recipe's slice of the prompt.")
    meta: dict[str, str | Integer | bool] = Field(default_factory=dict, max_length=16)
    event_id: str | None = Field(default=None, min_length=1, max_length=100, description="The client's own id "
                                 "for this feedback: a retry with the same id lands once.")

    @model_validator(mode="after")
    def rated_or_signalled(self) -> FeedbackRequest:
        """A feedback without a rating must name the implicit signal it is: otherwise it says nothing."""
        signal = self.meta.get("signal")
        if self.rating is None and not (isinstance(signal, str) and signal.strip(SPACE)):
            raise ValueError("rating must be 'up' or 'down', or null with meta.signal naming an implicit signal "
                             "(asked_again, copied)")
        return self


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    include_usage: bool = Field(default=False, description="A last chunk, with no choices, carries the usage.")


class OpenAIRequest(BaseModel):
    """What OpenAI's completions and chat completions share: the model, who asks, and how to decode. Options
    this gateway does not use and that change nothing in an answer (metadata, store, service_tier...) are
    accepted and ignored; those it cannot honour are refused with 400 (serving/options.py)."""

    model_config = ConfigDict(extra="allow", strict=True)
    model: str | None = Field(default=None, description="NAME or NAME@ALIAS as GET /v1/models lists them; unset: "
                              "the gateway's own choice (the champion, or the canary for its share of users).")
    user: str | None = Field(default=None, max_length=200, description="Who asks: stored with each answer "
                             "(default 'openai-client'); it also decides who meets the canary.")
    n: Integer = Field(default=1, ge=1, description="Answers per prompt; n times the prompts at most "
                   "RMI_SERVE_MAX_PROMPTS (else 400).")
    max_tokens: Positive | None = Field(default=None, description="At most this many new tokens, in the "
                                   "recipe's tokens; unset: the recipe's own limit.")
    temperature: float | None = Field(default=None, ge=0, le=2, description="0: greedy; above: sampled. Unset: "
                                      "the gateway's choice (greedy, but for RMI_SERVE_EXPLORE_SHARE sampled).")
    top_p: float | None = Field(default=None, gt=0, le=1, description="Nucleus sampling, where sampled.")
    stop: str | Annotated[list[str], Field(max_length=4)] | None = Field(
        default=None, description="Up to 4 texts; an answer ends before the first it meets, and does not contain it.")
    seed: Integer | None = Field(default=None, description="Sampling repeats: the same request with the same seed gets "
                             "the same answers from the same version (it is decoded in a forward pass of its own).")
    stream: bool = Field(default=False, description="Server-sent events (text/event-stream), sent once the answers "
                         "are recorded, split into the recipe's tokens, ending `data: [DONE]`.")
    stream_options: StreamOptions | None = None

    @property
    def stop_texts(self) -> tuple[str, ...]:
        texts = [self.stop] if isinstance(self.stop, str) else self.stop or []
        return tuple(t for t in texts if t)

    @property
    def user_id(self) -> str:
        return self.user or OPENAI_USER

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionsRequest(OpenAIRequest):
    prompt: str | Annotated[list[str], Field(min_length=1)] = Field(description="A prompt, or several (at least "
                                                                     "one) answered in order.")

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else self.prompt

    @property
    def new_tokens(self) -> int | None:
        return self.max_tokens


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    type: str = Field(description="Only 'text' parts are read (others: 400).")
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)  # name, tool_call_id...: read by no model here
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        """The message's text: its string, or its text parts joined (ValueError for a part of another type)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        others = sorted({p.type for p in self.content if p.type != "text"})
        if others:
            raise ValueError(f"only text parts are read, not {', '.join(others)}")
        return "".join(p.text or "" for p in self.content)


class ChatRequest(OpenAIRequest):
    messages: list[ChatMessage] = Field(min_length=1, description="The chat, oldest first; it ends with the user's "
                                        "question (docs/how-to/serving.md says how it becomes the prompt).")
    max_completion_tokens: Positive | None = Field(default=None, description="As max_tokens (which it replaces).")

    @property
    def new_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens
