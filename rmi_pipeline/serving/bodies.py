"""The JSON bodies the gateway accepts: validated here, so a route only ever sees a well-formed request."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

OPENAI_USER = "openai-client"  # who asks when an OpenAI client names no `user`


class AnswersRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Questions for the model, answered in order.")
    user_id: str = Field(min_length=1, max_length=200, description="Who asks: stored with each answer.")


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
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
    meta: dict[str, str | int | bool] = Field(default_factory=dict, max_length=16)
    event_id: str | None = Field(default=None, min_length=1, max_length=100, description="The client's own id "
                                 "for this feedback: a retry with the same id lands once.")

    @model_validator(mode="after")
    def rated_or_signalled(self) -> FeedbackRequest:
        """A feedback without a rating must name the implicit signal it is: otherwise it says nothing."""
        signal = self.meta.get("signal")
        if self.rating is None and not (isinstance(signal, str) and signal.strip()):
            raise ValueError("rating must be 'up' or 'down', or null with meta.signal naming an implicit signal "
                             "(asked_again, copied)")
        return self


class CompletionsRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI clients send options this gateway does not use
    prompt: str | list[str]
    model: str | None = None
    user: str | None = None

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else self.prompt

    @property
    def user_id(self) -> str:
        return self.user or OPENAI_USER
