"""Scripted ReAct conversations driven through a `ContextTracker`.

The "engine" here returns scripted token ids; the "agent" echoes each reply
back the way agentscope's OpenAI formatter does (content as text parts,
reasoning dropped, tool calls as OpenAI `tool_calls` with JSON-string
arguments) and appends tool results. This is what a real rollout looks like
to the tracker, without a model.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from astuner.core.tokenizer import ChatTokenizer
from astuner.core.tracker import ContextTracker
from astuner.core.trajectory import LLMCall

SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the knowledge base and return matching passages.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to look for"}},
            "required": ["query"],
        },
    },
}

_TOPICS = ["weather in Paris", "python list sort", "the sum of 6 and 7", "population of Lyon"]
_FILLER = [
    "the",
    "result",
    "shows",
    "that",
    "value",
    "number",
    "list",
    "name",
    "query",
    "temperature",
    "city",
    "file",
    "code",
    "print",
    "error",
    "return",
    "answer",
    "search",
    "json",
    "output",
    "check",
    "step",
    "first",
    "then",
]


@dataclass
class Turn:
    """One model reply: the tokens it generates, and the tool output that answers it.

    `ids` are exactly what the engine returns (the end-of-turn token is
    appended when `finish == "stop"`); `tool_output` is None for the final answer.
    """

    ids: list[int]
    tool_output: str | None = None
    finish: str = "stop"


@dataclass
class Episode:
    """What `run_episode` recorded: the calls, and what the engine produced for each."""

    calls: list[LLMCall] = field(default_factory=list)
    produced: list[list[int]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)


def tool_call_text(name: str, arguments: dict[str, Any], style: str = "hermes") -> str:
    """How a model of the given family writes a tool call."""
    if style == "llama3_json":
        return json.dumps({"name": name, "parameters": arguments})
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def filler_text(tokenizer: ChatTokenizer, n_tokens: int, seed: int = 0) -> str:
    """Prose of exactly `n_tokens` tokens under `tokenizer` (a tool output stand-in)."""
    rng = random.Random(seed)
    words = " ".join(rng.choice(_FILLER) for _ in range(n_tokens + 8))
    ids = tokenizer.encode(words)
    while len(ids) < n_tokens:
        ids = ids + ids
    text = tokenizer.decode(ids[:n_tokens])
    # Decoding then encoding can merge differently at the cut; trim until it round-trips.
    while len(tokenizer.encode(text)) > n_tokens:
        text = text[:-1]
    return text


def react_turns(
    tokenizer: ChatTokenizer,
    n_calls: int,
    *,
    tool_output_tokens: int = 60,
    style: str = "hermes",
    think: bool = False,
    seed: int = 0,
) -> list[Turn]:
    """`n_calls - 1` tool-calling replies, then a final answer.

    With `think`, every reply opens with a `<think>` block, as a reasoning
    model writes it.
    """
    rng = random.Random(seed)
    turns = []
    for i in range(n_calls):
        thought = f"Step {i + 1}: I should look up {rng.choice(_TOPICS)}."
        prefix = f"<think>\n{thought}\n</think>\n\n" if think else f"{thought}\n"
        if i < n_calls - 1:
            # A Llama-3 tool call is the whole reply: no prose around the JSON.
            call_prefix = prefix if style == "hermes" or think else ""
            text = call_prefix + tool_call_text("search", {"query": rng.choice(_TOPICS)}, style)
            output = filler_text(tokenizer, tool_output_tokens, seed=seed * 1000 + i)
        else:
            text, output = prefix + "The answer is 42.", None
        turns.append(Turn([*tokenizer.encode(text), tokenizer.end_of_turn_id], output))
    return turns


def fake_logprobs(n: int, offset: int = 0) -> list[float]:
    """Deterministic, distinct negative log-probs for n tokens."""
    return [-0.001 * ((offset + j) % 997 + 1) for j in range(n)]


def echo_assistant(call: LLMCall, agent_name: str) -> dict[str, Any]:
    """The assistant message an agentscope-style agent puts back into its history."""
    return {
        "role": "assistant",
        "name": agent_name,
        "content": [{"type": "text", "text": call.content}] if call.content else None,
        "tool_calls": [tc.to_openai() for tc in call.tool_calls] or None,
    }


def run_episode(
    tracker: ContextTracker,
    turns: Sequence[Turn],
    *,
    system: str = "You are a helpful agent. Use the tools when you need facts.",
    user: str = "What is the answer to the question?",
    tools: Sequence[dict[str, Any]] | None = (SEARCH_TOOL,),
    agent_name: str = "agent",
    history: list[dict[str, Any]] | None = None,
) -> Episode:
    """Drive `tracker` through a ReAct loop with scripted replies.

    Each reply's tool calls are answered with the turn's `tool_output`;
    malformed calls get their error message. The loop ends at the first
    reply without tool calls or when the turns run out. Pass `history` to
    continue an earlier conversation instead of starting a new one.
    """
    messages = (
        history
        if history is not None
        else [
            {"role": "system", "name": "system", "content": [{"type": "text", "text": system}]},
            {"role": "user", "name": "user", "content": [{"type": "text", "text": user}]},
        ]
    )
    ep = Episode(messages=messages)
    offset = 0
    for turn in turns:
        prep = tracker.prepare(messages, list(tools) if tools else None, agent_name)
        lps = fake_logprobs(len(turn.ids), offset)
        offset += len(turn.ids)
        call = (
            tracker.record(prep, turn.ids, lps, turn.finish)
            if prep.stop_reason is None
            else (tracker.record(prep))
        )
        ep.calls.append(call)
        ep.produced.append(list(turn.ids) if prep.stop_reason is None else [])
        if prep.stop_reason is not None:
            break
        messages.append(echo_assistant(call, agent_name))
        for tc in call.tool_calls:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": tc.id,
                    "name": tc.name,
                    "content": turn.tool_output or "",
                }
            )
        if not call.tool_calls:
            break
    return ep
