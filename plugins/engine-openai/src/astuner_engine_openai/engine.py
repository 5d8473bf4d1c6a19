"""Engine `openai`: any OpenAI-compatible chat endpoint (LLM judges, auxiliary models, debug runs).

A hosted model returns text, not token ids, so runs through this engine
are recorded (messages, replies, rewards) but marked untrainable.

Calls go through the OpenAI SDK (a dependency of this package), whose client retries
connection errors, 408, 409, 429 and 5xx answers `max_retries` times,
waiting as long as the server's `Retry-After` says (else an exponential
back-off), so a rate-limited endpoint slows a run instead of failing it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from astuner.api import AstunerError, ChatReply, Register, SamplingParams, hookimpl

if TYPE_CHECKING:
    from astuner.api import EngineModel


class OpenAIEngineSettings(BaseModel):
    """`rollout.engines.openai`."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(
        None,
        description="e.g. https://host/v1; default the model's URL (rollout.engine_url for the policy).",
    )
    model: str | None = Field(
        None, description="Model name; default the model's path (model.path for the policy)."
    )
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable with the key.")
    request_timeout: float = Field(600.0, gt=0)
    max_retries: int = Field(
        4,
        ge=0,
        description="Retries of a call that could not connect or was answered 408, 409, 429 or 5xx, "
        "after the server's Retry-After or an exponential back-off (the OpenAI SDK's retries); "
        "0 fails on the first such answer.",
    )


class OpenAIChatEngine:
    """A chat engine: messages in, text and tool calls out, for `model` (its path names the served model)."""

    trainable = False

    def __init__(self, settings: OpenAIEngineSettings, model: EngineModel) -> None:
        base_url = settings.base_url or model.url
        if not base_url:
            raise AstunerError(
                "Engine 'openai' needs an endpoint: set rollout.engines.openai.base_url "
                "(or rollout.engine_url), e.g. http://127.0.0.1:8000/v1."
            )
        try:
            import openai
        except ImportError as exc:
            raise AstunerError(
                "Engine 'openai' needs the openai package (a dependency of astuner-engine-openai that is "
                "missing here): pip install openai."
            ) from exc
        self._openai = openai
        self.model = settings.model or model.path
        self.base_url = base_url.rstrip("/")
        self.max_retries = settings.max_retries
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=os.environ.get(settings.api_key_env, "EMPTY"),
            timeout=settings.request_timeout,
            max_retries=settings.max_retries,
        )

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        sampling: SamplingParams,
    ) -> ChatReply:
        openai = self._openai
        endpoint = f"{self.base_url}/chat/completions"
        tries = self.max_retries + 1
        tried = f"{tries} {'try' if tries == 1 else 'tries'} (the engine's max_retries is {self.max_retries})"
        request: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if tools:
            request["tools"] = list(tools)
        try:
            completion = await self._client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            raise AstunerError(
                f"{endpoint} answered {exc.status_code} after {tried}: {_error_text(exc)}"
            ) from exc
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise AstunerError(f"{endpoint} could not be reached after {tried}: {exc}") from exc
        choice = completion.choices[0]
        message = choice.message
        return ChatReply(
            content=message.content or "",
            tool_calls=[call.model_dump(exclude_unset=True) for call in message.tool_calls or []],
            finish_reason="length" if choice.finish_reason == "length" else "stop",
        )

    async def aclose(self) -> None:
        await self._client.close()


def _error_text(exc: Any) -> str:
    body = exc.response.text if exc.response is not None else str(exc)
    return body[:500]


@hookimpl
def register_engines(register: Register) -> None:
    register(
        "openai",
        OpenAIChatEngine,
        settings=OpenAIEngineSettings,
        summary="Any OpenAI-compatible chat endpoint (text only: debug runs, not trainable).",
    )
