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
    """Token ids in, token ids and log-probs out.

    The smallest one, which ends every reply at once (`register_engines` on
    the plugin page shows one built from its settings):

    ```python
    from collections.abc import Sequence

    from astuner.api import Generation, SamplingParams, TokenEngine


    class Silent:
        def __init__(self, end_of_turn_id: int) -> None:
            self.end_of_turn_id = end_of_turn_id

        async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
            return Generation(token_ids=[self.end_of_turn_id], logprobs=[0.0], finish_reason="stop")


    assert isinstance(Silent(end_of_turn_id=2), TokenEngine)
    ```
    """

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation: ...


@dataclass
class ChatReply:
    """A chat engine's answer: text and tool calls, no token ids.

    `tool_calls` are in OpenAI's shape; a call without an `id` is given one:

    ```python
    from astuner.api import ChatReply

    ChatReply(content="Nairobi.")
    ChatReply(content="", tool_calls=[{"function": {"name": "search", "arguments": '{"query": "Kenya"}'}}])
    ```
    """

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: FinishReason = "stop"


@runtime_checkable
class ChatEngine(Protocol):
    """OpenAI-style messages in, text out (not trainable).

    ```python
    from collections.abc import Mapping, Sequence
    from typing import Any

    from astuner.api import ChatEngine, ChatReply, SamplingParams


    class Polite:
        async def chat(
            self,
            messages: Sequence[Mapping[str, Any]],
            tools: Sequence[Mapping[str, Any]] | None,
            sampling: SamplingParams,
        ) -> ChatReply:
            return ChatReply(content="Thank you for asking.")


    assert isinstance(Polite(), ChatEngine)
    ```
    """

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        sampling: SamplingParams,
    ) -> ChatReply: ...
