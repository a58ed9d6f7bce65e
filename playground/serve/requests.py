"""The requests the server accepts, as pydantic models: the one place a request is validated.

Types are strict (`"stream": "no"` is not a boolean, `1e999` is not a token count), numbers must be finite, and
OpenAI parameters this server does not implement are refused when they ask for something other than the default,
instead of being silently ignored. Other unknown fields are ignored, as vLLM ignores them. What needs the model
(token ids within the vocabulary, the prompt within the context) is checked by the app, before any work is done.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from playground.engine.config import max_new_tokens_problem, seed_problem, temperature_problem, top_p_problem
from playground.engine.loop import EMPTY_PROMPT, prompt_text_problem

MAX_STOP_STRINGS = 16
MAX_STOP_LENGTH = 256

# OpenAI parameters that would change the answer, with the values that mean "not asked for".
UNSUPPORTED = {
    "n": (None, 1), "best_of": (None, 1), "logprobs": (None, False), "top_logprobs": (None, 0), "echo": (None, False),
    "suffix": (None, ""), "logit_bias": (None, {}), "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0), "repetition_penalty": (None, 1, 1.0), "tools": (None, []),
    "response_format": (None, {"type": "text"}), "min_tokens": (None, 0), "prompt_logprobs": (None, 0),
    "tool_choice": (None, "none"), "functions": (None, []), "function_call": (None, "none"), "audio": (None,),
    "modalities": (None, ["text"]), "prediction": (None,),
}
WHY_UNSUPPORTED = {  # the reason each is refused, by what it would ask of the server
    **dict.fromkeys(("n", "best_of"), "it serves one answer per request"),
    **dict.fromkeys(("logprobs", "top_logprobs", "prompt_logprobs"), "it returns no log-probabilities"),
    **dict.fromkeys(("tools", "tool_choice", "functions", "function_call"),
                    "it calls no tools: answers are plain text"),
    "response_format": "it does not constrain the answer's format",
    **dict.fromkeys(("presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "min_tokens"),
                    "it samples from the target's own distribution, without penalties, biases or a minimum length"),
    **dict.fromkeys(("echo", "suffix"), "it completes the prompt as given, without echo or suffix"),
    **dict.fromkeys(("audio", "modalities", "prediction"), "it serves text only, without predicted outputs"),
}
# Accepted and ignored, as vLLM does: they change nothing in the answer ("user", "store", "metadata",
# "service_tier", "parallel_tool_calls", "reasoning_effort", "stream_options.include_obfuscation", ...).


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)

    @model_validator(mode="after")
    def _refuse_unsupported(self) -> Strict:
        for name, value in (self.model_extra or {}).items():
            if name in UNSUPPORTED and value not in UNSUPPORTED[name]:
                raise PydanticCustomError("unsupported", "`{param}` is not supported by this server ({why}); leave it "
                                          "out", {"param": name, "why": WHY_UNSUPPORTED[name]})
        return self


class StreamOptions(Strict):
    include_usage: bool = False


class Message(Strict):
    role: Literal["developer", "system", "user", "assistant"]
    content: str | list[dict[str, Any]]

    @field_validator("role")
    @classmethod
    def _developer_is_system(cls, role: str) -> str:
        # OpenAI's `developer` role replaces `system` for newer models; chat templates know only `system`.
        return "system" if role == "developer" else role

    @field_validator("content")
    @classmethod
    def _text_only(cls, content: str | list[dict[str, Any]]) -> str:
        if isinstance(content, str):
            return content
        if not all(part.get("type") == "text" and isinstance(part.get("text"), str) for part in content):
            raise ValueError("only text content parts are supported")
        return "".join(part["text"] for part in content)


CHECKS = {"temperature": temperature_problem, "top_p": top_p_problem, "seed": seed_problem,
          "max_tokens": max_new_tokens_problem, "max_completion_tokens": max_new_tokens_problem}


def in_range(value: float | int | None, info: ValidationInfo) -> float | int | None:
    """`value` refused by the engine's own check of its field (CHECKS), so that the CLI, the app and the server
    refuse in the same words."""
    problem = None if value is None else CHECKS[info.field_name](value)
    if problem:
        raise ValueError(problem)
    return value


class Sampling(Strict):
    """What every generation request shares."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None  # None: the server's default (serve/defaults.py)
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool = False

    @field_validator("temperature", "top_p", "seed", "max_tokens")
    @classmethod
    def _in_range(cls, value: float | int | None, info: ValidationInfo) -> float | int | None:
        return in_range(value, info)

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, stop: str | list[str] | None) -> list[str]:
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings")
        if any(not s or len(s) > MAX_STOP_LENGTH for s in stops):
            raise ValueError(f"stop strings must be 1 to {MAX_STOP_LENGTH} characters")
        return stops

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return tuple(self.stop or ())

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt: str | list) -> str | list[int]:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise ValueError("one prompt per request (this server does not batch prompts)")
            prompt = prompt[0]
        problem = prompt_text_problem(prompt) if isinstance(prompt, str) else EMPTY_PROMPT if not prompt else None
        if problem:
            raise ValueError(problem)
        return prompt


class ChatCompletionRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = None
    chat_template: str | None = None

    @field_validator("messages")
    @classmethod
    def _a_question(cls, messages: list[Message]) -> list[Message]:
        """The last user turn must hold text, as the Chat tab's and the CLI's prompt must (prompt_text_problem)."""
        asked = [m.content for m in messages if m.role == "user"]
        problem = prompt_text_problem(asked[-1]) if asked else None
        if problem:
            raise ValueError(problem)
        return messages

    @field_validator("max_completion_tokens")
    @classmethod
    def _a_budget(cls, value: int | None, info: ValidationInfo) -> int | None:
        return in_range(value, info)

    @property
    def answer_budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class TokenizeRequest(Strict):
    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    add_special_tokens: bool = True
    chat_template: str | None = None

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of `prompt` or `messages`")
        return self


class DetokenizeRequest(Strict):
    model: str | None = None
    tokens: list[int]
