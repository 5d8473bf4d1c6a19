"""The inference-engine contract.

A *token engine* is called with prompt token ids and returns the sampled
token ids with their log-probs: what training needs. A *chat engine* talks
to a remote chat endpoint that returns only text (a hosted model): usable
for debug runs, never for training.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one response. `temperature == 0` means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 512
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class Generation(NamedTuple):
    """A token engine's answer.

    `logprobs[i]` is the log-probability of `token_ids[i]` under the
    sampling distribution at temperature `T` (log-softmax of logits / T;
    T = 1 when greedy), which is what the trainer recomputes.
    `policy_version` says which weights sampled it (the number of policy
    updates a trainer had pushed to the engine), None when unknown.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    policy_version: int | None = None


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
