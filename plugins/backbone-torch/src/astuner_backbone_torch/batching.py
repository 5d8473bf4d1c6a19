"""Samples into micro-batches: length bucketing under a token budget.

Samples are sorted by length and cut into consecutive runs whose padded
size (rows x longest row) stays within `max_tokens`, choosing the cuts that
waste the fewest padded tokens, so a micro-batch holds sequences of similar
length; the gradient is accumulated over the micro-batches of a step. A
sample longer than the budget gets a micro-batch of its own.

Tensors are laid out for next-token prediction: row `i` holds the sample's
ids, and position `t` of the target-side tensors (`targets`, `mask`,
`old_logprobs`, `advantages`; `T = L - 1` columns) describes token `t + 1`,
which the logits at position `t` predict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from astuner.core.trajectory import Sample


@dataclass
class MicroBatch:
    """One forward/backward pass worth of samples.

    input_ids, attention_mask: `(B, L)`; targets: `(B, L-1)` long;
    mask, old_logprobs, advantages: `(B, L-1)` float32. `old_logprobs` is
    None when the engine gave none. `indices` are the samples' positions in
    the list given to `make_micro_batches`.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    old_logprobs: torch.Tensor | None
    advantages: torch.Tensor
    indices: list[int]

    @property
    def padded_tokens(self) -> int:
        return int(self.input_ids.numel())

    @property
    def real_tokens(self) -> int:
        return int(self.attention_mask.sum())

    def to(self, device: torch.device | str) -> MicroBatch:
        def move(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x.to(device, non_blocking=True)

        return MicroBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.targets.to(device),
            self.mask.to(device),
            move(self.old_logprobs),
            self.advantages.to(device),
            self.indices,
        )


# What one more micro-batch costs beyond its padded tokens (a pass's fixed
# overhead), in tokens: enough to stop the plan from cutting many tiny batches.
BATCH_COST_TOKENS = 64


def plan_micro_batches(
    lengths: Sequence[int], max_tokens: int, batch_cost: int = BATCH_COST_TOKENS
) -> list[list[int]]:
    """Group sample indices so that `len(group) * max(length in group) <= max_tokens`.

    Samples are taken shortest first (ties in index order) and cut into
    consecutive groups that minimise the padded tokens of all groups plus
    `batch_cost` per group: a dynamic program over the sorted lengths,
    O(n x the most rows a group can hold). A sample longer than
    `max_tokens` is alone in its group.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    sorted_lengths = [lengths[i] for i in order]
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cheapest plan of the first j sorted samples
    start = [0] * (n + 1)  # start[j]: where the last group of that plan begins
    for j in range(1, n + 1):
        longest = sorted_lengths[j - 1]  # sorted ascending: the group's last sample is its longest
        most_rows = max(1, max_tokens // max(longest, 1))
        for i in range(max(0, j - most_rows), j):
            cost = best[i] + (j - i) * longest + batch_cost
            if cost < best[j]:
                best[j], start[j] = cost, i
    groups: list[list[int]] = []
    j = n
    while j > 0:
        groups.append(order[start[j] : j])
        j = start[j]
    return groups[::-1]


def collate(samples: Sequence[Sample], indices: list[int], pad_id: int) -> MicroBatch:
    """Right-pad the chosen samples into one `MicroBatch`."""
    rows = [samples[i] for i in indices]
    width = max(len(s.input_ids) for s in rows)
    b = len(rows)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.float32)
    advantages = torch.zeros((b, width), dtype=torch.float32)
    have_old = all(s.old_logprobs is not None for s in rows)
    old = torch.zeros((b, width), dtype=torch.float32) if have_old else None
    for r, s in enumerate(rows):
        n = len(s.input_ids)
        ids[r, :n] = torch.tensor(s.input_ids, dtype=torch.long)
        attention[r, :n] = 1
        mask[r, :n] = torch.tensor(s.loss_mask, dtype=torch.float32)
        advantages[r, :n] = torch.tensor(s.advantages, dtype=torch.float32)
        if old is not None:
            old[r, :n] = torch.tensor(s.old_logprobs, dtype=torch.float32)
    return MicroBatch(
        input_ids=ids,
        attention_mask=attention,
        targets=ids[:, 1:].clone(),
        mask=mask[:, 1:].contiguous(),
        old_logprobs=None if old is None else old[:, 1:].contiguous(),
        advantages=advantages[:, 1:].contiguous(),
        indices=list(indices),
    )


def make_micro_batches(samples: Sequence[Sample], max_tokens: int, pad_id: int) -> list[MicroBatch]:
    """Length-bucketed micro-batches of at most `max_tokens` padded tokens each."""
    plan = plan_micro_batches([len(s.input_ids) for s in samples], max_tokens)
    return [collate(samples, group, pad_id) for group in plan]
