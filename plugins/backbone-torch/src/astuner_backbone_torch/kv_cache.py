"""Keys and values of a running batch, in buffers allocated ahead and written in place.

transformers' `DynamicCache` grows every layer's keys and values with
`torch.cat` at each decoding step, a copy of the whole cache per token
(21% of a 32-row SmolLM2 step by token 128, issue 36), and the running batch
copied it again whenever rows joined or left. `SlotCache` instead holds, per
layer, one buffer pair `(slots, kv heads, columns, head dim)` sized for the
batch's rows and their prompts plus new tokens; a step writes each row's new
key and value at that row's next column. Rows are left-aligned: row `r`'s
tokens fill columns `0 .. length - 1` of slot `r`, with no padding, so a
joining row copies only its own keys and values into the next free slot, and
a leaving row frees its slot (the rows after it move up one slot each, the
batch keeping its order, which the seeded sampler's draws follow). Buffers
grow by doubling when a row or column beyond them is needed, never per token.

Models whose attention is not plain causal attention over every past token
(sliding windows, chunked or recurrent layers) cannot take the one mask this
layout gives every layer; `GrowingCache` runs them on transformers' own cache,
rows leaving by selection and none joining.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from astuner_backbone_torch.prefix_cache import LayerKV

# Columns allocated beyond the longest prompt when a batch starts: a row that
# asks for thousands of new tokens and writes fifty does not hold memory for
# thousands (SmolLM2: 46 kB a column and row in float32); longer rows double it.
FIRST_NEW_COLUMNS = 256


def takes_slot_cache(model: Any) -> bool:
    """Whether every attention layer of `model` attends to all past tokens through sdpa or eager
    attention: what one additive mask `(rows, 1, 1, columns)` for all layers expresses."""
    config = (
        model.config.get_text_config(decoder=True)
        if hasattr(model.config, "get_text_config")
        else model.config
    )
    if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(kind == "full_attention" for kind in layer_types)
    return all(getattr(config, name, None) is None for name in ("sliding_window", "attention_chunk_size"))


class _SlotLayer(DynamicLayer):
    """One layer's buffers; `SlotCache.update` writes them (a `DynamicLayer` to the model's mask code:
    full attention, not sliding)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values = keys, values
        self.device = keys.device
        self.is_initialized = True


class SlotCache(Cache):
    """Up to `slots` rows' keys and values, up to `columns` tokens each, preallocated.

    A decoding step: `step_inputs` gives the mask and positions of one new
    token per row, the model's forward calls `update` per layer (writing
    the token's key and value in place), then `advance`.
    """

    def __init__(self, like: Sequence[LayerKV], slots: int, columns: int) -> None:
        """`like`: one `(keys, values)` per layer, `(rows, kv heads, tokens, head dim)`, giving the
        buffers' heads, head sizes, dtype and device."""
        super().__init__(layers=[_SlotLayer(*self._buffers(k, v, slots, columns)) for k, v in like])
        keys = like[0][0]
        self.device = keys.device
        self.rows = 0
        # Tokens each slot holds: its next token's position and column.
        self.lengths = torch.zeros(slots, dtype=torch.long, device=self.device)
        # Added to attention scores: 0 at a slot's columns that hold its tokens, the least value elsewhere.
        self.bias = torch.full(
            (slots, columns), torch.finfo(keys.dtype).min, dtype=keys.dtype, device=self.device
        )
        self._slot_index = torch.arange(slots, device=self.device)
        self._width = 0

    @staticmethod
    def _buffers(
        keys: torch.Tensor, values: torch.Tensor, slots: int, columns: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Zeros, not empty: a masked column's weight is 0, and 0 x NaN garbage would be NaN.
        return (
            keys.new_zeros((slots, keys.shape[1], columns, keys.shape[-1])),
            values.new_zeros((slots, values.shape[1], columns, values.shape[-1])),
        )

    @property
    def slots(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def columns(self) -> int:
        return int(self.bias.shape[1])

    def _longest(self) -> int:
        return int(self.lengths[: self.rows].max()) if self.rows else 0

    def reserve(self, slots: int, columns: int) -> None:
        """Room for at least `slots` rows of `columns` tokens: each dimension that falls short at least
        doubles (the rows' keys and values copied over once)."""
        if slots <= self.slots and columns <= self.columns:
            return
        slots = max(slots, 2 * self.slots) if slots > self.slots else self.slots
        columns = max(columns, 2 * self.columns) if columns > self.columns else self.columns
        rows, used = self.rows, self._longest()
        for layer in self.layers:
            keys, values = self._buffers(layer.keys, layer.values, slots, columns)
            keys[:rows, :, :used] = layer.keys[:rows, :, :used]
            values[:rows, :, :used] = layer.values[:rows, :, :used]
            layer.keys, layer.values = keys, values
        lengths = self.lengths.new_zeros(slots)
        lengths[:rows] = self.lengths[:rows]
        bias = self.bias.new_full((slots, columns), torch.finfo(self.bias.dtype).min)
        bias[:rows, :used] = self.bias[:rows, :used]
        self.lengths, self.bias = lengths, bias
        self._slot_index = torch.arange(slots, device=self.device)

    def join(self, layers: Sequence[LayerKV], attention: torch.Tensor, columns: int) -> None:
        """Add rows after the current ones: `layers` per layer `(new rows, kv heads, W, head dim)`, of
        which each row's attended columns (`attention` `(new rows, W)`) are its tokens, in order.
        `columns`: how many tokens the new rows may reach, reserved now."""
        first, added = self.rows, attention.shape[0]
        counts = attention.sum(-1).tolist()
        self.reserve(first + added, max(columns, *counts))
        for row, count in enumerate(counts):
            slot = first + row
            taken = attention[row].nonzero()[:, 0]
            for layer, (keys, values) in zip(self.layers, layers, strict=True):
                layer.keys[slot, :, :count] = keys[row].index_select(1, taken)
                layer.values[slot, :, :count] = values[row].index_select(1, taken)
            self.bias[slot].fill_(torch.finfo(self.bias.dtype).min)
            self.bias[slot, :count] = 0
            self.lengths[slot] = count
        self.rows = first + added

    def keep(self, kept: Sequence[int]) -> None:
        """Keep the rows at `kept` (ascending), which move up to slots `0 .. len(kept) - 1`."""
        moved = next((new for new, old in enumerate(kept) if new != old), len(kept))
        if moved < len(kept):
            source = torch.tensor(kept[moved:], dtype=torch.long, device=self.device)
            used = int(self.lengths[source].max())
            target = slice(moved, len(kept))
            for layer in self.layers:  # the right side is gathered (copied) before it is written
                layer.keys[target, :, :used] = layer.keys[source, :, :used]
                layer.values[target, :, :used] = layer.values[source, :, :used]
            self.bias[target] = self.bias[source]  # whole rows: the slots' former rows attended further
            self.lengths[target] = self.lengths[source]
        self.rows = len(kept)

    def row_kv(self, slot: int) -> list[LayerKV]:
        """Slot `slot`'s tokens' keys and values per layer, `(kv heads, length, head dim)`, copied out."""
        length = int(self.lengths[slot])
        copy = torch.contiguous_format
        return [
            (
                layer.keys[slot, :, :length].clone(memory_format=copy),
                layer.values[slot, :, :length].clone(memory_format=copy),
            )
            for layer in self.layers
        ]

    def step_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention mask `(rows, 1, 1, width)` and position ids `(rows, 1)` of one new token per row,
        whose columns (each row's length) become attended; views of the buffers, valid until `advance`."""
        rows = self.rows
        self._width = self._longest() + 1
        self.reserve(self.slots, self._width)
        positions = self.lengths[:rows]
        self.bias[self._slot_index[:rows], positions] = 0
        return self.bias[:rows, None, None, : self._width], positions[:, None]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one token's keys and values `(rows, kv heads, 1, head dim)` at each row's next column;
        the rows' keys and values up to the step's width (views)."""
        if key_states.shape[-2] != 1:
            raise ValueError("SlotCache takes one token per row and step; prompts run on a DynamicCache")
        layer = self.layers[layer_idx]
        rows = self.rows
        slots, columns = self._slot_index[:rows], self.lengths[:rows]
        layer.keys[slots, :, columns] = key_states[:, :, 0]
        layer.values[slots, :, columns] = value_states[:, :, 0]
        return layer.keys[:rows, :, : self._width], layer.values[:rows, :, : self._width]

    def advance(self) -> None:
        """Each row ran its new token: one more token held."""
        self.lengths[: self.rows] += 1

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._longest()

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self._longest() + query_length, 0


class GrowingCache:
    """transformers' own cache of the rows, for models that `takes_slot_cache` refuses: each step's
    column is appended (the cache grows by `torch.cat`), rows leave by selection, none join."""

    def __init__(self, cache: Any, attention: torch.Tensor) -> None:
        self.cache = cache
        self.attention = attention  # (rows, W): 1 where a column holds the row's token
        self.positions = attention.sum(-1)

    @property
    def rows(self) -> int:
        return int(self.attention.shape[0])

    def keep(self, kept: Sequence[int]) -> None:
        if len(kept) == self.rows:
            return
        index = torch.tensor(kept, dtype=torch.long, device=self.attention.device)
        self.cache.batch_select_indices(index)
        self.attention, self.positions = self.attention[index], self.positions[index]

    def step_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.attention = torch.cat([self.attention, self.attention.new_ones((self.rows, 1))], dim=1)
        return self.attention, self.positions[:, None]

    def advance(self) -> None:
        self.positions = self.positions + 1
