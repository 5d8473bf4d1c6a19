"""The inference-engine contract.

A *token engine* is called with prompt token ids and returns the sampled
token ids with their log-probs: what training needs. A *chat engine* talks
to a remote chat endpoint that returns only text (a hosted model): usable
for debug runs, never for training.

The values both kinds exchange (`SamplingParams`, `Generation`,
`FinishReason`, `SAMPLING_KEYS`) live in `astuner.core.generation`, where
the token core can use them, and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from astuner.core.generation import SAMPLING_KEYS, FinishReason, Generation, SamplingParams

__all__ = [
    "SAMPLING_KEYS",
    "ChatEngine",
    "ChatReply",
    "FinishReason",
    "Generation",
    "SamplingParams",
    "TokenEngine",
]


@runtime_checkable
class TokenEngine(Protocol):
    """Token ids in, token ids and log-probs out."""

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation: ...


@dataclass
class ChatReply:
    """A chat engine's answer: text and tool calls, no token ids."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: FinishReason = "stop"


@runtime_checkable
class ChatEngine(Protocol):
    """OpenAI-style messages in, text out (not trainable)."""

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        sampling: SamplingParams,
    ) -> ChatReply: ...
