"""Engine `openai`: any OpenAI-compatible chat endpoint, for debug runs.

A hosted model returns text, not token ids, so runs through this engine
are recorded (messages, replies, rewards) but marked untrainable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from astuner.errors import AstunerError
from astuner.hookspecs import Register, hookimpl
from astuner.rollout.engine import ChatReply, SamplingParams

if TYPE_CHECKING:
    from astuner.config import AstunerConfig


class OpenAIEngineSettings(BaseModel):
    """`rollout.engines.openai`."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(None, description="e.g. https://host/v1; default rollout.engine_url.")
    model: str | None = Field(None, description="Model name; default model.path.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable with the key.")
    request_timeout: float = Field(600.0, gt=0)


class OpenAIChatEngine:
    """A chat engine: messages in, text and tool calls out."""

    trainable = False

    def __init__(self, settings: OpenAIEngineSettings, config: AstunerConfig) -> None:
        base_url = settings.base_url or config.rollout.engine_url
        if not base_url:
            raise AstunerError(
                "Engine 'openai' needs an endpoint: set rollout.engines.openai.base_url "
                "(or rollout.engine_url), e.g. http://127.0.0.1:8000/v1."
            )
        self.model = settings.model or config.model.path
        self.base_url = base_url.rstrip("/")
        key = os.environ.get(settings.api_key_env, "EMPTY")
        self._client = httpx.AsyncClient(
            timeout=settings.request_timeout, headers={"Authorization": f"Bearer {key}"}
        )

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        sampling: SamplingParams,
    ) -> ChatReply:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if tools:
            body["tools"] = list(tools)
        reply = await self._client.post(f"{self.base_url}/chat/completions", json=body)
        if reply.status_code != 200:
            raise AstunerError(
                f"{self.base_url}/chat/completions answered {reply.status_code}: {reply.text[:500]}"
            )
        choice = reply.json()["choices"][0]
        message = choice.get("message") or {}
        return ChatReply(
            content=message.get("content") or "",
            tool_calls=list(message.get("tool_calls") or []),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
        )

    async def aclose(self) -> None:
        await self._client.aclose()


@hookimpl
def register_engines(register: Register) -> None:
    register(
        "openai",
        OpenAIChatEngine,
        settings=OpenAIEngineSettings,
        summary="Any OpenAI-compatible chat endpoint (text only: debug runs, not trainable).",
    )
