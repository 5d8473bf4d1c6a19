"""Attention keys and values of sequences the engine already ran, for prompts that continue them.

An agent's second call repeats its first call's prompt and reply, and a GRPO
group sends one prompt `num_repeat` times. Running those tokens again
(prefill) is most of a multi-turn rollout's cost on CPU: a 241-token tool
prompt takes 0.4 s per row on one core, a decoding step for 16 rows 0.2 s.
The engine therefore keeps the keys and values of what it ran (each finished
row's prompt and reply) and starts a new prompt from the longest stored
sequence it continues, running only the rest.

Keys and values belong to the weights that computed them: the engine clears
the store whenever the weights change (`TransformersEngine.changing_weights`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

# A shorter match saves less than gathering its keys and values costs.
MIN_REUSED_TOKENS = 8

LayerKV = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class CachedSequence:
    """Token ids and, per layer, their keys and values `(heads, len(tokens), head_dim)`."""

    tokens: tuple[int, ...]
    layers: list[LayerKV]


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share (slice comparisons run in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


class PrefixStore:
    """Least-recently-used `CachedSequence`s, at most `max_tokens` tokens in all."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], CachedSequence] = OrderedDict()
        self.tokens = 0
        # Prompt tokens asked for and those actually run, over the store's life (decoding counts them).
        self.requested_tokens = 0
        self.computed_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, prompt: Sequence[int], limit: int) -> tuple[CachedSequence | None, int]:
        """The stored sequence sharing the most leading tokens with `prompt`, and how many (at most `limit`).

        `(None, 0)` when no entry shares `MIN_REUSED_TOKENS`. The caller
        sets `limit` below the prompt's length: the last prompt token must
        still run to give the next token's logits.
        """
        key = tuple(prompt)
        best: CachedSequence | None = None
        best_length = 0
        for entry in self._entries.values():
            length = min(common_prefix_length(entry.tokens, key), limit)
            if length > best_length:
                best, best_length = entry, length
        if best is None or best_length < MIN_REUSED_TOKENS:
            return None, 0
        self._entries.move_to_end(best.tokens)
        return best, best_length

    def add(self, tokens: Sequence[int], layers: list[LayerKV]) -> None:
        """Keep `tokens`' keys and values; entries it extends are dropped (it answers their lookups)."""
        key = tuple(tokens)
        if len(key) < MIN_REUSED_TOKENS or len(key) > self.max_tokens:
            return
        for old in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
            self._drop(old)
        self._entries[key] = CachedSequence(key, layers)
        self.tokens += len(key)
        while self.tokens > self.max_tokens:
            self._drop(next(iter(self._entries)))

    def clear(self) -> None:
        self._entries.clear()
        self.tokens = 0

    def _drop(self, key: tuple[int, ...]) -> None:
        del self._entries[key]
        self.tokens -= len(key)
