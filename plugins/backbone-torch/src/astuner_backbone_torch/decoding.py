"""A sampling loop that stops paying for rows once they have finished.

`model.generate` keeps every row of a batch in every decoding step until
the longest one ends, so a batch of 32 short answers and one ramble costs
32 rows x the ramble's length. RL rollouts are exactly that shape (the
bench's a+b prompts: 35 tokens on average, 128 at most). Here, rows that
hit a stop token or their own token limit leave the batch and the KV
cache at once; each step runs only the rows still going.

The loop reports, for every sampled token, its log-prob under
softmax(logits / T) of the unfiltered logits: the distribution the trainer
recomputes, whatever top-p/top-k did to the choice.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from astuner.rollout.engine import FinishReason
from astuner_backbone_torch.prefix_cache import MIN_REUSED_TOKENS, CachedSequence, LayerKV, PrefixStore


@dataclass(frozen=True)
class Sampler:
    """How the next token is picked: greedy, or sampled at `temperature` after top-k/top-p."""

    greedy: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def pick(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Next tokens `(B,)` and their log-probs `(B,)` float32, from last-position logits `(B, V)`."""
        scaled = logits.float()
        if not self.greedy and self.temperature != 1.0:
            scaled = scaled / self.temperature
        logprobs = torch.log_softmax(scaled, dim=-1)
        if self.greedy:
            tokens = scaled.argmax(dim=-1)
        else:
            probs = filtered_probs(logprobs, self.top_p, self.top_k)
            tokens = torch.multinomial(probs, 1)[:, 0]
        return tokens, logprobs.gather(1, tokens[:, None])[:, 0]


def filtered_probs(logprobs: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
    """Probabilities `(B, V)` restricted to the top-k tokens and the smallest top-p nucleus.

    The nucleus is the shortest run of most likely tokens whose mass reaches
    `top_p` (the most likely token always stays). `top_k <= 0` and
    `top_p >= 1` switch the filters off.
    """
    probs = logprobs.exp()
    vocab = probs.shape[-1]
    if 0 < top_k < vocab:
        kth = probs.topk(top_k, dim=-1).values[:, -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        outside = mass_before >= top_p * sorted_probs.sum(-1, keepdim=True)
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_probs)
    return probs


@dataclass
class DecodedRow:
    """What one prompt produced: its new tokens, their log-probs, and why it stopped."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


@torch.inference_mode()
def decode(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    sampler: Sampler,
    max_new_tokens: Sequence[int],
    stop_ids: Sequence[frozenset[int]],
    pad_id: int,
    prefixes: PrefixStore | None = None,
) -> list[DecodedRow]:
    """Generate for each prompt until one of its `stop_ids` (kept) or `max_new_tokens` of its own.

    prompts: `B` token lists, left-padded into one batch; `max_new_tokens`
    and `stop_ids` give each row's own limits. Uses the model's KV cache;
    finished rows are dropped from the batch and the cache immediately.
    With `prefixes`, each prompt starts from the longest stored sequence it
    continues, a prompt sent several times is run once, and every finished
    row's keys and values are stored for the calls that continue it.
    """
    device = next(model.parameters()).device
    starts = [_FRESH] * len(prompts)
    if prefixes is not None:
        prefixes.requested_tokens += sum(len(p) for p in prompts)
        starts = _starts(model, prompts, pad_id, prefixes)
    cache, attention, logits = _prefill(model, prompts, starts, pad_id, prefixes)
    next_position = attention.sum(-1)  # tokens each row has run: the next one's position
    store = prefixes if prefixes is not None and _layer_tensors(cache) is not None else None

    rows = [DecodedRow([], [], "length") for _ in prompts]
    alive = list(range(len(prompts)))  # original row of each batch row still decoding
    while True:
        tokens, logprobs = sampler.pick(logits)
        keep: list[int] = []
        picked = zip(alive, tokens.tolist(), logprobs.tolist(), strict=True)
        for slot, (row, token, logprob) in enumerate(picked):
            out = rows[row]
            out.token_ids.append(token)
            out.logprobs.append(logprob)
            if token in stop_ids[row]:
                out.finish_reason = "stop"
            elif len(out.token_ids) < max_new_tokens[row]:
                keep.append(slot)
                continue
            if store is not None:  # the last token never ran: the cache holds the rest
                store.add([*prompts[row], *out.token_ids[:-1]], _row_kv(cache, slot, attention[slot]))
        if not keep:
            return rows
        if len(keep) < len(alive):
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            attention, tokens, next_position = attention[index], tokens[index], next_position[index]
            alive = [alive[slot] for slot in keep]
        attention = torch.cat([attention, attention.new_ones((len(alive), 1))], dim=1)
        logits = model(
            input_ids=tokens[:, None],
            attention_mask=attention,
            position_ids=next_position[:, None],
            use_cache=True,
            **{_cache_argument(model): cache},
        ).logits[:, -1]
        next_position = next_position + 1


# Where a row's prompt starts running: a stored sequence and how many of its tokens it reuses.
Start = tuple[CachedSequence | None, int]
_FRESH: Start = (None, 0)


def _starts(model: Any, prompts: Sequence[Sequence[int]], pad_id: int, prefixes: PrefixStore) -> list[Start]:
    """Each prompt's longest stored start; a prompt found nowhere but sent several times is run once first."""
    starts = [prefixes.longest(p, len(p) - 1) for p in prompts]
    counts = Counter(tuple(p) for p, (_, reused) in zip(prompts, starts, strict=True) if not reused)
    heads = [list(p[:-1]) for p, n in counts.items() if n > 1 and len(p) > MIN_REUSED_TOKENS]
    if not heads:
        return starts
    cache, attention, _ = _prefill(model, heads, [_FRESH] * len(heads), pad_id, prefixes)
    if _layer_tensors(cache) is None:
        return starts
    for slot, head in enumerate(heads):
        prefixes.add(head, _row_kv(cache, slot, attention[slot]))
    return [s if s[1] else prefixes.longest(p, len(p) - 1) for p, s in zip(prompts, starts, strict=True)]


def _prefill(
    model: Any,
    prompts: Sequence[Sequence[int]],
    starts: Sequence[Start],
    pad_id: int,
    prefixes: PrefixStore | None,
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Run what each prompt's start does not hold; the cache, attention mask `(B, W)`, last logits `(B, V)`.

    Columns: the starts' keys and values right-aligned in `P` columns, then
    the remaining prompt tokens left-padded in `S` columns, so every row
    ends at the last column; padding is masked out wherever it falls.
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    past = max(reused for _, reused in starts)
    rests = [list(p[reused:]) for p, (_, reused) in zip(prompts, starts, strict=True)]
    width = max(len(r) for r in rests)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), past + width), dtype=torch.long)
    for row, (rest, (_, reused)) in enumerate(zip(rests, starts, strict=True)):
        input_ids[row, width - len(rest) :] = torch.tensor(rest, dtype=torch.long)
        attention[row, past - reused : past] = 1
        attention[row, past + width - len(rest) :] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    cache = DynamicCache()
    if past:
        for layer, (keys, values) in enumerate(_stacked(starts, past, device)):
            cache.update(keys, values, layer)
    if prefixes is not None:
        prefixes.computed_tokens += sum(len(r) for r in rests)
    logits = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0)[:, past:],
        use_cache=True,
        logits_to_keep=1,
        **{_cache_argument(model): cache},
    ).logits[:, -1]
    return cache, attention, logits


def _stacked(starts: Sequence[Start], past: int, device: torch.device) -> list[LayerKV]:
    """Per layer, the rows' stored keys and values `(B, heads, past, head_dim)`, right-aligned."""
    template = next(entry for entry, reused in starts if reused)
    stacked: list[LayerKV] = []
    for layer, (keys, values) in enumerate(template.layers):
        heads, _, dim = keys.shape
        batch_keys = keys.new_zeros((len(starts), heads, past, dim), device=device)
        batch_values = values.new_zeros((len(starts), heads, past, dim), device=device)
        for row, (entry, reused) in enumerate(starts):
            if entry is not None and reused:
                batch_keys[row, :, past - reused :] = entry.layers[layer][0][:, :reused]
                batch_values[row, :, past - reused :] = entry.layers[layer][1][:, :reused]
        stacked.append((batch_keys, batch_values))
    return stacked


def _layer_tensors(cache: Any) -> list[LayerKV] | None:
    """Per layer keys and values `(B, heads, W, head_dim)`; None when the cache is not plain attention
    layers (sliding windows that drop columns, recurrent state): those cannot be stored and reused."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    return [(layer.keys, layer.values) for layer in layers]


def _row_kv(cache: Any, slot: int, attention: torch.Tensor) -> list[LayerKV]:
    """Batch row `slot`'s keys and values at its attended columns `(heads, T, head_dim)`, copied."""
    columns = attention.nonzero()[:, 0]
    layers = _layer_tensors(cache) or []
    return [(k[slot].index_select(1, columns), v[slot].index_select(1, columns)) for k, v in layers]


def _cache_argument(model: Any) -> str:
    """`cache` in transformers 5.24+ (`past_key_values` there warns per call), `past_key_values` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # through a PEFT wrapper
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
