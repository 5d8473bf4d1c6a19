"""The model handle a workflow gets in a Ray worker: every call goes to the driver's gateway.

`RemoteModelTuner.chat()` (and an OpenAI client at `openai_base_url`) posts
to the runner's gateway at `/rollout/<rollout_id>/<agent>/v1/chat/completions`,
so the driver's handle tracks every call token for token exactly as in a
local run; the worker gets back the text, tool calls and token ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from astuner.api import AstunerError, ChatReply, LLMCall, ModelTuner, SamplingParams, ToolCall
from astuner.training import model_tuner_class, normalize_messages


@dataclass
class GatewayReply(ChatReply):
    """A gateway answer: the chat reply plus the token ids the driver recorded."""

    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    reasoning: str | None = None


class GatewayClient:
    """A `ChatEngine` over one rollout's gateway route for one agent (OpenAI chat completions)."""

    def __init__(self, base_url: str, timeout: float) -> None:
        self.base_url = base_url
        self._client = httpx.AsyncClient(timeout=timeout)

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        sampling: SamplingParams,
    ) -> GatewayReply:
        body: dict[str, Any] = {
            "messages": list(messages),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if tools:
            body["tools"] = list(tools)
        reply = await self._client.post(f"{self.base_url}/chat/completions", json=body)
        if reply.status_code != 200:
            raise AstunerError(
                f"The gateway at {self.base_url} answered {reply.status_code}: {reply.text[:500]}"
            )
        data = reply.json()
        choice = data["choices"][0]
        message = choice.get("message") or {}
        return GatewayReply(
            content=message.get("content") or "",
            tool_calls=list(message.get("tool_calls") or []),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            prompt_ids=list(data.get("prompt_token_ids") or []),
            response_ids=list(choice.get("token_ids") or []),
            reasoning=message.get("reasoning_content"),
        )

    async def aclose(self) -> None:
        await self._client.aclose()


class RemoteModelTuner(ModelTuner):
    """The model handle a workflow gets in a Ray worker: every call goes to the driver's gateway.

    `chat()` returns the call with its text, tool calls and token ids; the
    trainable record (with log-probs) is the driver's, so calls here are
    marked `trainable=False`.
    """

    def __init__(
        self,
        *,
        rollout_id: str,
        gateway_url: str,
        sampling: SamplingParams,
        timeout: float,
        trainable_targets: Sequence[str] | None = None,
        agent_name: str = "default",
        auxiliary_models: Mapping[str, ModelTuner] | None = None,
    ) -> None:
        self._route = f"{gateway_url}/rollout/{rollout_id}"
        self._timeout = timeout
        self._clients: dict[str, GatewayClient] = {}
        super().__init__(
            rollout_id=rollout_id,
            engine=self._client_for(agent_name),
            sampling=sampling,
            gateway_url=gateway_url,
            auxiliary_models=auxiliary_models,
            trainable_targets=trainable_targets,
            agent_name=agent_name,
        )

    def _client_for(self, agent_name: str) -> GatewayClient:
        """One client per agent name: the agent is part of the gateway path."""
        if agent_name not in self._clients:
            self._clients[agent_name] = GatewayClient(f"{self._route}/{agent_name}/v1", self._timeout)
        return self._clients[agent_name]

    def for_agent(self, agent_name: str) -> ModelTuner:
        view = super().for_agent(agent_name)
        view.engine = self._client_for(agent_name)
        return view

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        agent_name: str | None = None,
        **sampling: Any,
    ) -> LLMCall:
        if agent_name is not None and agent_name != self.agent_name:
            return await self.for_agent(agent_name).chat(messages, tools, **sampling)
        normalized = normalize_messages(messages)
        params = replace(self.sampling, **sampling) if sampling else self.sampling
        reply = await self.engine.chat(normalized, tools, params)
        call = LLMCall(
            index=len(self._text_calls),
            agent_name=self.agent_name,
            messages=normalized,
            tools=[dict(t) for t in tools] if tools else None,
            prompt_ids=reply.prompt_ids,
            response_ids=reply.response_ids,
            finish_reason=reply.finish_reason,
            content=reply.content,
            text=reply.content,
            reasoning=reply.reasoning,
            tool_calls=[
                ToolCall(id=tc["id"], name=tc["function"]["name"], arguments=tc["function"]["arguments"])
                for tc in reply.tool_calls
            ],
            trainable=False,
        )
        self._text_calls.append(call)
        return call

    async def aclose(self) -> None:
        await super().aclose()
        for client in self._clients.values():
            await client.aclose()


def remote_model_tuner_class() -> type[RemoteModelTuner]:
    """`RemoteModelTuner`, also an AgentScope chat model when the workflow uses AgentScope."""
    local = model_tuner_class()
    if local is ModelTuner:
        return RemoteModelTuner
    # The AgentScope class's __call__ ends in self.chat(), which this class sends to the gateway.
    return type("AgentScopeRemoteModelTuner", (RemoteModelTuner, local), {})
