"""Samples into micro-batches: shared prompt prefixes, length bucketing under a token budget.

Samples are sorted by length and cut into consecutive runs whose padded
size (rows x longest row) stays within `max_tokens`, choosing the cuts that
waste the fewest padded tokens, so a micro-batch holds sequences of similar
length; the gradient is accumulated over the micro-batches of a step. A
sample longer than the budget gets a micro-batch of its own.

With `share_prefix`, samples that start with the same long run of tokens (a
GRPO group's `num_repeat` rollouts of one prompt) are first put together:
such a micro-batch holds the common prefix once (`prefix_ids`, run once by
the trainer, its keys and values serving every row) and rows of the tokens
after it. The prefix ends before every member's first trained token, since
the trainer computes no logits for it. Its padded size is `p + rows x
longest suffix`; groups are chosen where they save tokens, and the samples
that share nothing are bucketed by length as above.

Tensors are laid out for next-token prediction: row `i` holds the sample's
ids (after the prefix, if any), and position `t` of the target-side tensors
(`targets`, `mask`, `old_logprobs`, `advantages`, `temperatures`; `T = L - 1`
columns) describes the row's token `t + 1`, which the logits at position `t`
predict. `temperatures` holds the temperature each token's log-prob is
taken at: the one its call was sampled with (`Sample.response_sampling`),
so calls of one rollout sampled at different temperatures are each trained
on their own distribution; tokens of calls without a record take the
`temperature` given (the config's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from astuner.training import Sample


@dataclass
class MicroBatch:
    """One forward/backward pass worth of samples.

    input_ids, attention_mask: `(B, L)`; targets: `(B, L-1)` long;
    mask, old_logprobs, advantages, temperatures: `(B, L-1)` float32.
    `old_logprobs` is None when the engine gave none; `temperatures` is the
    T of each target's log-prob, log-softmax(logits / T). `indices` are
    the samples' positions in the list given to `make_micro_batches`. `prefix_ids` `(p,)`, when set,
    are the first `p` tokens of every sample, run once; the rows then hold
    each sample's tokens from `p` on (row column `t` is the sample's token
    `p + t`), and no target column lies in the prefix.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    old_logprobs: torch.Tensor | None
    advantages: torch.Tensor
    temperatures: torch.Tensor
    indices: list[int]
    prefix_ids: torch.Tensor | None = None

    @property
    def prefix_length(self) -> int:
        return 0 if self.prefix_ids is None else int(self.prefix_ids.shape[0])

    @property
    def padded_tokens(self) -> int:
        """Token positions the decoder runs: the prefix once, every row padded to the longest."""
        return int(self.input_ids.numel()) + self.prefix_length

    @property
    def real_tokens(self) -> int:
        return int(self.attention_mask.sum()) + self.prefix_length

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
            self.temperatures.to(device),
            self.indices,
            move(self.prefix_ids),
        )

    def unshared(self) -> MicroBatch:
        """The same samples with the prefix written into every row (`self` when there is none).

        Target column `p + t` of the result is column `t` of `self`; the
        columns before `p` describe prefix tokens and are never trained.
        """
        if self.prefix_ids is None:
            return self
        rows, p = self.input_ids.shape[0], self.prefix_length

        def widen(x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
            return torch.cat([x.new_full((rows, p), fill), x], dim=1)

        ids = torch.cat([self.prefix_ids.expand(rows, -1), self.input_ids], dim=1)
        return MicroBatch(
            input_ids=ids,
            attention_mask=torch.cat([self.attention_mask.new_ones((rows, p)), self.attention_mask], dim=1),
            targets=ids[:, 1:].clone(),
            mask=widen(self.mask),
            old_logprobs=None if self.old_logprobs is None else widen(self.old_logprobs),
            advantages=widen(self.advantages),
            temperatures=widen(self.temperatures, 1.0),
            indices=self.indices,
        )


# What one more micro-batch costs beyond its padded tokens (a pass's fixed
# overhead), in tokens: enough to stop the plan from cutting many tiny batches.
BATCH_COST_TOKENS = 64

# The shortest prefix worth running once: below it the two decoder passes
# of a shared micro-batch cost about what they save.
MIN_SHARED_PREFIX = 32


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


def prefix_limit(sample: Sample) -> int:
    """The most leading tokens of `sample` that a shared prefix may hold.

    If token `k` is the first trained one, the logits at position `k - 1`
    predict it, and only rows get logits: the prefix ends before `k - 1`.
    A sample with nothing trained keeps at least its last token in its row.
    """
    mask = sample.loss_mask
    first = next((k for k in range(1, len(mask)) if mask[k] > 0), len(sample.input_ids))
    return first - 1


def plan_shared_prefixes(
    input_ids: Sequence[Sequence[int]],
    limits: Sequence[int],
    max_tokens: int,
    min_prefix: int = MIN_SHARED_PREFIX,
    batch_cost: int = BATCH_COST_TOKENS,
) -> tuple[list[tuple[list[int], int]], list[int]]:
    """Which samples run a common prefix once: `([(indices, prefix length), ...], the other indices)`.

    `limits[i]` caps the prefix of a group holding sample `i` (see
    `prefix_limit`). Sorted by their token ids, samples with long common
    prefixes are neighbours; a dynamic program cuts that order into runs
    that are either one shared micro-batch (two or more samples, a common
    prefix `p >= min_prefix` within every member's limit, `p + rows x
    longest suffix <= max_tokens`, costing that plus `batch_cost`) or one
    sample left to length bucketing (costing its length plus its share of
    a full bucket's `batch_cost`), at the least total cost. O(n x the most
    rows a group can hold) after the sort.
    """
    floor = max(min_prefix, 1)  # a prefix of 0 tokens marks an unshared run below
    alone = 1.0 + batch_cost / max_tokens  # per token of a sample left to the length buckets
    order = sorted(range(len(input_ids)), key=lambda i: (tuple(input_ids[i]), i))
    ids = [torch.as_tensor(input_ids[i], dtype=torch.long) for i in order]
    caps = [limits[i] for i in order]
    n = len(order)
    # shared[k]: common prefix length of the k-th and (k-1)-th sorted samples
    shared = [0] + [_common_prefix_length(ids[k - 1], ids[k]) for k in range(1, n)]
    best = [0.0] + [float("inf")] * n  # best[j]: cheapest plan of the first j sorted samples
    last = [(0, 0)] * (n + 1)  # last[j]: that plan's last run, as (its start, its prefix; 0: unshared)
    for j in range(1, n + 1):
        best[j], last[j] = best[j - 1] + alone * len(ids[j - 1]), (j - 1, 0)
        prefix, longest = caps[j - 1], len(ids[j - 1])
        for i in range(j - 2, -1, -1):
            # In sorted order the run's common prefix is the least of its neighbours' ones.
            prefix = min(prefix, shared[i + 1], caps[i])
            longest = max(longest, len(ids[i]))
            size = prefix + (j - i) * (longest - prefix)
            if prefix < floor or size > max_tokens:  # both only get worse as the run grows
                break
            if best[i] + size + batch_cost < best[j]:
                best[j], last[j] = best[i] + size + batch_cost, (i, prefix)
    groups: list[tuple[list[int], int]] = []
    rest: list[int] = []
    j = n
    while j > 0:
        i, prefix = last[j]
        if prefix:
            groups.append((sorted(order[i:j]), prefix))
        else:
            rest.append(order[i])
        j = i
    return groups[::-1], sorted(rest)


def _common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0, 0]) if len(differ) else n


def token_temperatures(sample: Sample, temperature: float = 1.0) -> list[float]:
    """Per token of `sample`, the T its log-prob is at: its call's recorded one in each response
    span, `temperature` elsewhere and for calls recorded without one (older records)."""
    temperatures = [temperature] * len(sample.input_ids)
    for (start, end, _), sampling in zip(sample.response_spans, sample.response_sampling, strict=False):
        if sampling is not None:
            temperatures[start:end] = [sampling.logprob_temperature] * (end - start)
    return temperatures


def _right_pad(
    rows: Sequence[Sequence[float]], value: float, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """`(B, longest)`: each row followed by `value`."""
    return pad_sequence([torch.tensor(r, dtype=dtype) for r in rows], batch_first=True, padding_value=value)


def collate(
    samples: Sequence[Sample],
    indices: list[int],
    pad_id: int,
    prefix_length: int = 0,
    temperature: float = 1.0,
) -> MicroBatch:
    """Right-pad the chosen samples into one `MicroBatch` (their first `prefix_length` ids: `prefix_ids`;
    `temperature`: the log-prob temperature of calls recorded without their sampling)."""
    rows = [samples[i] for i in indices]
    p = prefix_length
    prefix = rows[0].input_ids[:p]
    if any(s.input_ids[:p] != prefix for s in rows):
        raise ValueError(f"the samples {indices} do not share their first {p} tokens")
    for s in rows:  # padding would hide a short list, where assigning rows of the wrong width raised
        per_token = [s.loss_mask, s.advantages] + ([] if s.old_logprobs is None else [s.old_logprobs])
        if any(len(column) != len(s.input_ids) for column in per_token):
            raise ValueError(f"sample {s.trajectory_id!r}: a per-token list differs in length from input_ids")
    ids = _right_pad([s.input_ids[p:] for s in rows], pad_id, torch.long)
    attention = _right_pad([[1] * (len(s.input_ids) - p) for s in rows], 0, torch.long)
    mask = _right_pad([s.loss_mask[p:] for s in rows], 0.0)
    advantages = _right_pad([s.advantages[p:] for s in rows], 0.0)
    temperatures = _right_pad([token_temperatures(s, temperature)[p:] for s in rows], 1.0)
    have_old = all(s.old_logprobs is not None for s in rows)
    old = _right_pad([s.old_logprobs[p:] for s in rows], 0.0) if have_old else None
    return MicroBatch(
        input_ids=ids,
        attention_mask=attention,
        targets=ids[:, 1:].clone(),
        mask=mask[:, 1:].contiguous(),
        old_logprobs=None if old is None else old[:, 1:].contiguous(),
        advantages=advantages[:, 1:].contiguous(),
        temperatures=temperatures[:, 1:].contiguous(),
        indices=list(indices),
        prefix_ids=torch.tensor(prefix, dtype=torch.long) if p else None,
    )


def make_micro_batches(
    samples: Sequence[Sample],
    max_tokens: int,
    pad_id: int,
    share_prefix: bool = False,
    temperature: float = 1.0,
) -> list[MicroBatch]:
    """Micro-batches of at most `max_tokens` padded tokens each: shared-prefix groups, then length buckets.

    Without `share_prefix` every micro-batch is length-bucketed. `temperature`
    is the log-prob temperature of calls recorded without their sampling.
    """
    if share_prefix:
        ids = [s.input_ids for s in samples]
        groups, rest = plan_shared_prefixes(ids, [prefix_limit(s) for s in samples], max_tokens)
    else:
        groups, rest = [], list(range(len(samples)))
    plan = plan_micro_batches([len(samples[i].input_ids) for i in rest], max_tokens)
    return [collate(samples, group, pad_id, p, temperature) for group, p in groups] + [
        collate(samples, [rest[k] for k in group], pad_id, temperature=temperature) for group in plan
    ]
