"""The gateway's replies in OpenAI's shapes: a `chat.completion`, or its server-sent chunks.

A recorded `LLMCall` becomes the reply an OpenAI-SDK agent reads, with
vLLM's `prompt_token_ids` / `token_ids` added so a client that records
tokens itself (the Ray workers' `GatewayClient`) gets the exact ids.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from astuner.core.trajectory import LLMCall


def openai_tool_calls(call: LLMCall) -> list[dict[str, Any]]:
    """The call's tool calls in OpenAI's shape.

    A reply whose tool call did not parse has none: it is plain assistant
    text (`call.content`), so every agent framework keeps running on it.
    """
    return [tc.to_openai() for tc in call.tool_calls]


def _finish_reason(call: LLMCall, tool_calls: list[dict[str, Any]]) -> str:
    if tool_calls:
        return "tool_calls"
    # OpenAI says `length` for a reply cut by the token limit or the context; a prompt with no room
    # left for the reply budget (`context_overflow`, nothing generated) is the second kind.
    return "length" if call.finish_reason in ("length", "context_overflow") else "stop"


def completion(call: LLMCall, model: str, completion_id: str) -> dict[str, Any]:
    """A `chat.completion` object, with vLLM-style `prompt_token_ids` / `token_ids` added."""
    tool_calls = openai_tool_calls(call)
    message: dict[str, Any] = {"role": "assistant", "content": call.content or (None if tool_calls else "")}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if call.reasoning:
        message["reasoning_content"] = call.reasoning
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(call, tool_calls),
                "token_ids": call.response_ids,
            }
        ],
        "prompt_token_ids": call.prompt_ids,
        "usage": _usage(call),
    }


def _usage(call: LLMCall) -> dict[str, int]:
    prompt, generated = len(call.prompt_ids), len(call.response_ids)
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def completion_chunks(call: LLMCall, model: str, completion_id: str, include_usage: bool) -> Iterator[str]:
    """The same reply as server-sent `chat.completion.chunk` events."""
    created = int(time.time())

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        chunk = {
            **_chunk_head(completion_id, created, model),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(chunk)}\n\n"

    tool_calls = openai_tool_calls(call)
    yield event({"role": "assistant", "content": ""})
    if call.content:
        yield event({"content": call.content})
    for i, tc in enumerate(tool_calls):
        yield event({"tool_calls": [{"index": i, **tc}]})
    yield event({}, _finish_reason(call, tool_calls))
    if include_usage:
        usage = {**_chunk_head(completion_id, created, model), "choices": [], "usage": _usage(call)}
        yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"


def _chunk_head(completion_id: str, created: int, model: str) -> dict[str, Any]:
    return {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
