"""The model handle's chat concern: how one call is made and recorded.

A token engine's call goes through the rollout's `ContextTracker`, which
renders the exact prompt ids, has the engine generate within what is left
of the context, and records the call with its ids and log-probs. A chat
engine (an OpenAI-compatible server, the tracker absent) takes messages and
returns text: its call is recorded from that text, with no ids, and never
trains. `ModelTuner.chat()` chooses between the two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from astuner.core.chat import normalize_messages
from astuner.core.trajectory import LLMCall, ToolCall
from astuner.rollout.engine import Generation, SamplingParams

if TYPE_CHECKING:
    from astuner.core.tracker import ContextTracker


async def tracked_call(
    tracker: ContextTracker,
    engine: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    agent_name: str,
    params: SamplingParams,
) -> LLMCall:
    """One call of a token engine, its prompt ids from the tracker, recorded there."""

    async def generate(prompt_ids: list[int], max_new_tokens: int) -> Generation:
        budget = replace(params, max_tokens=min(params.max_tokens, max_new_tokens))
        # A Generation, or the `(ids, logprobs, finish_reason)` of an engine written before versions.
        generation = Generation(*await engine.generate(prompt_ids, budget))
        return generation if generation.sampling is not None else generation._replace(sampling=budget)

    return await tracker.call(messages, tools, agent_name, generate)


def drop_tool_calls(call: LLMCall) -> None:
    """Under `rollout.disable_toolcalls` a call's whole text is its content: it made no tool call."""
    if call.tool_calls or call.tool_call_errors:
        call.content, call.tool_calls, call.tool_call_errors = call.text, [], []
        call.tool_parse_error = None


async def text_only_call(
    engine: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    agent_name: str,
    params: SamplingParams,
    index: int,
) -> LLMCall:
    """One call of a chat engine, recorded as call `index` from the text it returns (untrainable)."""
    normalized = normalize_messages(messages)
    reply = await engine.chat(normalized, tools, params)
    return LLMCall(
        index=index,
        agent_name=agent_name,
        messages=normalized,
        tools=[dict(t) for t in tools] if tools else None,
        finish_reason=reply.finish_reason,
        text=reply.content,
        content=reply.content,
        tool_calls=[
            ToolCall(
                id=tc.get("id") or f"call_{i}",
                name=tc["function"]["name"],
                arguments=tc["function"].get("arguments") or "{}",
            )
            for i, tc in enumerate(reply.tool_calls)
        ],
        sampling=params.record(),
        trainable=False,
    )
