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

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from astuner.training import FinishReason
from astuner_backbone_torch.kv_cache import FIRST_NEW_COLUMNS, GrowingCache, SlotCache, takes_slot_cache
from astuner_backbone_torch.models import cache_argument
from astuner_backbone_torch.packed_decoder import PackedDecoder
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
        if self.greedy:
            tokens = scaled.argmax(dim=-1)
            return tokens, scaled.gather(1, tokens[:, None])[:, 0] - torch.logsumexp(scaled, dim=-1)
        if self.top_p >= 1.0 and not 0 < self.top_k < scaled.shape[-1]:
            # Unfiltered (RL's sampling): one exponential over the vocabulary gives both the draw and
            # the log-normaliser, where log_softmax then exp took two more passes.
            top = scaled.amax(dim=-1, keepdim=True)
            tokens, total = _inverse_cdf((scaled - top).exp_())
            logprobs = scaled.gather(1, tokens[:, None])[:, 0] - top[:, 0] - total.log()
            return tokens, logprobs
        logprobs = torch.log_softmax(scaled, dim=-1)
        tokens = inverse_cdf_sample(filtered_probs(logprobs, self.top_p, self.top_k))
        return tokens, logprobs.gather(1, tokens[:, None])[:, 0]


def inverse_cdf_sample(probs: torch.Tensor) -> torch.Tensor:
    """One token per row `(B,)` from unnormalised probabilities `(B, V)`, with one uniform draw a row.

    `torch.multinomial` draws an exponential variate for every vocabulary entry: on a CPU, 26 ms
    of a 115 ms decoding step for 32 rows of SmolLM2's 49k tokens; this takes about 1 ms. A token
    of probability 0 is never picked (its cumulative sum equals its predecessor's).
    """
    return _inverse_cdf(probs)[0]


# Vocabulary entries per block of the two-level inverse CDF.
_BLOCK = 256


def _inverse_cdf(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`inverse_cdf_sample`'s tokens `(B,)`, and each row's total probability `(B,)`.

    Two levels, as a cumulative sum over the whole vocabulary is sequential
    per row (3 ms of a step for 32 x 49k): the draw picks a block of `_BLOCK`
    entries from the blocks' cumulative sums, then an entry inside it from
    that block's own. Exact inverse-CDF sampling, up to float rounding.
    """
    rows, vocab = probs.shape
    whole = vocab - vocab % _BLOCK
    sums = probs[:, :whole].reshape(rows, -1, _BLOCK).sum(-1)
    if whole < vocab:
        sums = torch.cat([sums, probs[:, whole:].sum(-1, keepdim=True)], dim=1)
    cdf = sums.cumsum(dim=-1)
    total = cdf[:, -1]
    draw = torch.rand(rows, 1, dtype=cdf.dtype, device=cdf.device) * total[:, None]
    block = torch.searchsorted(cdf, draw, right=True).clamp(max=cdf.shape[1] - 1)  # (B, 1)
    before = torch.where(block > 0, cdf.gather(1, (block - 1).clamp(min=0)), 0.0)
    columns = block * _BLOCK + torch.arange(_BLOCK, device=probs.device)  # (B, _BLOCK)
    inside = probs.gather(1, columns.clamp(max=vocab - 1)) * (columns < vocab)
    offset = torch.searchsorted(inside.cumsum(dim=-1), draw - before, right=True)
    tokens = (block * _BLOCK + offset)[:, 0]
    beyond = (offset[:, 0] >= _BLOCK) | (tokens >= vocab)
    if bool(beyond.any()):  # float rounding put a draw past its block's end: the block's likeliest then
        tokens = torch.where(beyond, block[:, 0] * _BLOCK + inside.argmax(dim=-1), tokens)
    return tokens, total


def filtered_probs(logprobs: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
    """Probabilities `(B, V)` restricted to the top-k tokens and the smallest top-p nucleus.

    transformers' own warpers: the nucleus is the shortest run of most likely
    tokens whose mass reaches `top_p` (the most likely token always stays).
    `top_k <= 0` and `top_p >= 1` switch the filters off. The warpers return
    new tensors, so `logprobs` stays the unfiltered distribution.
    """
    scores = logprobs
    if 0 < top_k < logprobs.shape[-1]:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return scores.exp()


@dataclass
class DecodedRow:
    """What one prompt produced: its new tokens, their log-probs, and why it stopped."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


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

    prompts: `B` token lists decoded as one `RunningBatch`; `max_new_tokens`
    and `stop_ids` give each row's own limits.
    """
    batch = RunningBatch(model, sampler, pad_id, prefixes)
    rows = batch.add(prompts, max_new_tokens, stop_ids)
    while batch:
        batch.step()
    return rows


@dataclass
class _Row:
    prompt: Sequence[int]
    max_new_tokens: int
    stop_ids: frozenset[int]
    out: DecodedRow
    on_done: Callable[[DecodedRow], None] | None


class RunningBatch:
    """Rows decoding together, one token each per `step`, their keys and values in one `SlotCache`.

    Rows leave the batch and the cache as soon as they finish, and new rows
    may join between steps (`add`): an agent whose reply ended early sends its
    next turn while longer replies are still being written, and does not wait
    for them. A step writes each row's new key and value in place; joining
    and leaving copy only the rows that join, and those behind a leaving row
    (`kv_cache`). A model the slot cache cannot serve (sliding windows,
    recurrent layers) decodes on transformers' own cache, without joining.

    With `prefixes`, a joining prompt starts from the longest stored sequence
    it continues, a prompt sent several times is run once, and every finished
    row's keys and values are stored for the calls that continue it. With a
    `decoder` (`packed_decoder`), decoding steps on the slot cache run through
    it instead of the model's forward; prompts always run through the model.
    """

    def __init__(
        self,
        model: Any,
        sampler: Sampler,
        pad_id: int,
        prefixes: PrefixStore | None = None,
        decoder: PackedDecoder | None = None,
    ) -> None:
        self.model = model
        self.sampler = sampler
        self.pad_id = pad_id
        self.prefixes = prefixes
        self.decoder = decoder
        self._rows: list[_Row] = []
        self._kv: SlotCache | GrowingCache | None = None
        self._logits = torch.zeros((0, 0))  # (B, V) of each row's next token

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def can_join(self) -> bool:
        """Whether rows can join now: the batch is empty or its keys and values are in a `SlotCache`."""
        return not self._rows or isinstance(self._kv, SlotCache)

    @torch.inference_mode()
    def add(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        stop_ids: Sequence[frozenset[int]],
        on_done: Sequence[Callable[[DecodedRow], None] | None] | None = None,
    ) -> list[DecodedRow]:
        """Run the prompts (what no stored sequence holds) and add them as rows; their results, filled as
        they decode. `on_done[i]` is called with row i's result when it finishes."""
        if not self.can_join:
            raise RuntimeError("rows cannot join a batch whose model decodes without a SlotCache")
        starts = [_FRESH] * len(prompts)
        if self.prefixes is not None:
            self.prefixes.requested_tokens += sum(len(p) for p in prompts)
            starts = _starts(self.model, prompts, self.pad_id, self.prefixes)
        cache, attention, logits = _prefill(self.model, prompts, starts, self.pad_id, self.prefixes)
        layers = _layer_tensors(cache)
        columns = max(
            len(p) + min(n, FIRST_NEW_COLUMNS) for p, n in zip(prompts, max_new_tokens, strict=True)
        )
        if not isinstance(self._kv, SlotCache):
            if layers is not None and takes_slot_cache(self.model):
                self._kv = SlotCache(layers, len(prompts), columns)
            else:
                self._kv = GrowingCache(cache, attention)
                self.prefixes = None  # this model's cache cannot be stored and reused
        if isinstance(self._kv, SlotCache):
            if layers is None:
                raise RuntimeError("a prompt's keys and values came back in a cache of other layers")
            self._kv.join(layers, attention, columns)
        outs = [DecodedRow([], [], "length") for _ in prompts]
        callbacks = on_done or [None] * len(prompts)
        self._logits = torch.cat([self._logits, logits]) if self._rows else logits
        self._rows += [
            _Row(p, n, stops, out, done)
            for p, n, stops, out, done in zip(prompts, max_new_tokens, stop_ids, outs, callbacks, strict=True)
        ]
        return outs

    @torch.inference_mode()
    def step(self) -> None:
        """Sample every row's next token; finished rows leave (`on_done`), the others run their token."""
        kv = self._kv
        if kv is None:
            return
        tokens, logprobs = self.sampler.pick(self._logits)
        keep: list[int] = []
        picked = zip(self._rows, tokens.tolist(), logprobs.tolist(), strict=True)
        for slot, (row, token, logprob) in enumerate(picked):
            out = row.out
            out.token_ids.append(token)
            out.logprobs.append(logprob)
            if token in row.stop_ids:
                out.finish_reason = "stop"
            elif len(out.token_ids) < row.max_new_tokens:
                keep.append(slot)
                continue
            if self.prefixes is not None and isinstance(kv, SlotCache):  # the last token never ran
                self.prefixes.add([*row.prompt, *out.token_ids[:-1]], kv.row_kv(slot))
            if row.on_done is not None:
                row.on_done(out)
        kv.keep(keep)
        if len(keep) < len(self._rows):
            tokens = tokens[torch.tensor(keep, dtype=torch.long, device=tokens.device)]
            self._rows = [self._rows[slot] for slot in keep]
        if not keep:
            if isinstance(kv, GrowingCache):
                self._kv = None
            return
        attention, positions = kv.step_inputs()
        if self.decoder is not None and isinstance(kv, SlotCache):
            self._logits = self.decoder.step(tokens, kv, attention, positions)
            kv.advance()
            return
        self._logits = self.model(
            input_ids=tokens[:, None],
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            **{cache_argument(self.model): kv if isinstance(kv, SlotCache) else kv.cache},
        ).logits[:, -1]
        kv.advance()


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
        **{cache_argument(model): cache},
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
    """A prefill's row `slot`: its keys and values at its attended columns `(heads, T, head_dim)`, copied."""
    columns = attention.nonzero()[:, 0]
    layers = _layer_tensors(cache) or []
    return [(k[slot].index_select(1, columns), v[slot].index_select(1, columns)) for k, v in layers]
