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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from astuner.rollout.engine import FinishReason


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
) -> list[DecodedRow]:
    """Generate for each prompt until one of its `stop_ids` (kept) or `max_new_tokens` of its own.

    prompts: `B` token lists, left-padded into one batch; `max_new_tokens`
    and `stop_ids` give each row's own limits. Uses the model's KV cache;
    finished rows are dropped from the batch and the cache immediately.
    """
    from transformers import DynamicCache

    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    batch = len(prompts)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        attention[row, width - len(prompt) :] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    # Left padding: each row's positions count its own tokens only.
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    logits = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    ).logits[:, -1]
    next_position = positions[:, -1] + 1

    rows = [DecodedRow([], [], "length") for _ in prompts]
    alive = list(range(batch))  # original row of each batch row still decoding
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
            past_key_values=cache,
            use_cache=True,
        ).logits[:, -1]
        next_position = next_position + 1
