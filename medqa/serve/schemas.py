"""Request/response models: the OpenAI subset we serve, and the ``/v1/mcq`` request.

Only fields we honour are declared; other OpenAI fields are accepted and ignored (``extra="ignore"``)
so the official client's defaults never cause a 422.  The ``/v1/mcq`` response is the engine's
:class:`medqa.engine.result.AnswerResult` (schema ``medqa.answer/1``).
"""
from __future__ import annotations

import time
import uuid
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..records import MAX_OPTIONS, MIN_OPTIONS


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------------------------------------- /v1/models
class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "medqa"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# ---------------------------------------------------------------------------------------------- shared
class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class StreamOptions(_Request):
    include_usage: bool = False


StopType = Optional[Union[str, list[str]]]


class _GenerationParams(_Request):
    model: str = Field("medqa", description="Model id from /v1/models (any value is served by the loaded model).")
    max_tokens: Optional[int] = Field(None, ge=1, description="Tokens to generate (capped by the server's --max-tokens).")
    temperature: Optional[float] = Field(None, ge=0, le=2, description="0 = greedy (the default here).")
    top_p: Optional[float] = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=1, description="Only n=1 is supported.")
    stop: StopType = Field(None, description="Up to 4 stop strings.")
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    user: Optional[str] = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: StopType) -> StopType:
        stops = [v] if isinstance(v, str) else (v or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop strings")
        if any(len(s) > 64 for s in stops):
            raise ValueError("stop strings must be at most 64 characters")
        return v


# ---------------------------------------------------------------------------------------------- chat
class TextPart(_Request):
    type: Literal["text"] = "text"
    text: str


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[TextPart], None] = None
    name: Optional[str] = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatCompletionRequest(_GenerationParams):
    messages: list[ChatMessage] = Field(min_length=1, max_length=64)
    max_completion_tokens: Optional[int] = Field(None, ge=1)

    def token_budget(self) -> Optional[int]:
        return self.max_completion_tokens or self.max_tokens


class ChatResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatResponseMessage
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str = Field(default_factory=lambda: new_id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChatDelta(BaseModel):
    role: Optional[Literal["assistant"]] = None
    content: Optional[str] = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    finish_reason: Optional[Literal["stop", "length"]] = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Optional[Usage] = None


# ---------------------------------------------------------------------------------------------- completions
class CompletionRequest(_GenerationParams):
    prompt: Union[str, list[str]] = Field(description="One prompt (a list of one string is accepted too).")
    max_tokens: Optional[int] = Field(16, ge=1)
    echo: bool = False
    logprobs: Optional[int] = Field(None, ge=0, le=20, description="Top log-probabilities per generated token (0-20).")

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: Union[str, list[str]]) -> Union[str, list[str]]:
        if isinstance(v, list) and len(v) != 1:
            raise ValueError("send one prompt per request (a string, or a list with one string)")
        return v

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class CompletionLogprobs(BaseModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[Optional[float]] = Field(default_factory=list)
    top_logprobs: list[Optional[dict[str, float]]] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: Optional[Literal["stop", "length"]] = None
    logprobs: Optional[CompletionLogprobs] = None


class CompletionResponse(BaseModel):
    id: str = Field(default_factory=lambda: new_id("cmpl"))
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Optional[Usage] = None


# ---------------------------------------------------------------------------------------------- /v1/mcq
class MCQRequest(_Request):
    """One multiple-choice question.  Options may also be embedded in the question (``"... A) x B) y"``)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "question": "A 24-year-old woman has fatigue, pallor and a low MCV. Which test best confirms iron deficiency?",
        "options": ["Serum ferritin", "Hemoglobin electrophoresis", "Vitamin B12 level", "Reticulocyte count"],
        "explain": False,
    }]})

    question: str = Field(min_length=1, description="Question text (a clinical vignette is fine).")
    options: list[str] = Field(default_factory=list, max_length=MAX_OPTIONS,
                               description=f"{MIN_OPTIONS}-{MAX_OPTIONS} option texts in order A, B, ...")
    id: Optional[str] = Field(None, max_length=128, description="Your id for the question (default: a content hash).")
    context: str = Field("", description="Optional evidence to put in the prompt's context block.")
    explain: Optional[bool] = Field(None, description="Generate an explanation (slower). Default: the server's setting.")
    rag: Optional[bool] = Field(None, description="Retrieve evidence when the server has a RAG index (default: yes).")
    max_explanation_tokens: Optional[int] = Field(None, ge=1, description="Cap on explanation tokens.")


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    model: str
    ready: bool
    queue: int = Field(description="MCQ questions waiting for the scorer.")
    batching: dict = Field(default_factory=dict, description="Scoring calls so far: batches, items, mean_batch, largest.")
    uptime_s: float
