"""Exact prefix merge: a trajectory's calls become training samples.

Walking the calls in order, a call extends the sample of an earlier call of
the same agent when its prompt ids start with that sample's ids (the
earlier prompt + response, and whatever was merged since); otherwise it
starts a new sample. A linear ReAct episode tracked in cumulative mode thus
becomes one sample instead of one per call, and each shared prefix is
trained (and attended over) once.

In a sample, `loss_mask` is 1 exactly on the tokens a call generated
(its end-of-turn token included) and 0 on everything else: the prompt,
tool and environment outputs, and template tokens the model never wrote.
Every generated token is trained exactly once: a reply that comes back in a
later, unmerged prompt is a prompt token (mask 0) there.

When a call of an agent that already has a sample extends none of them,
merging records a `PrefixBreak` saying why (`astuner.core.prefix_breaks`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, fields

from astuner.core.prefix_breaks import BREAK_REASONS, PrefixBreak, prefix_break
from astuner.core.trajectory import LLMCall, Sample, Trajectory


@dataclass
class MergeReport:
    """What merging did to one trajectory (or, summed, to a batch).

    `episodes`: trajectories merged (failed ones are not);
    `tokens_trained`: tokens in the merged samples (what the trainer runs);
    `tokens_unmerged`: tokens if every call were its own sample;
    `generated_tokens`: tokens with loss mask 1 (each generated token once);
    `breaks`: the prefix breaks, in call order; `drifts`: merged calls whose
    prompt the tracker marked `drift`.
    """

    calls: int = 0
    samples: int = 0
    tokens_trained: int = 0
    tokens_unmerged: int = 0
    generated_tokens: int = 0
    episodes: int = 0
    drifts: int = 0
    breaks: list[PrefixBreak] = field(default_factory=list)

    @property
    def reduction(self) -> float:
        """`tokens_unmerged / tokens_trained` (1.0 when nothing was trained)."""
        return self.tokens_unmerged / self.tokens_trained if self.tokens_trained else 1.0

    @property
    def samples_per_episode(self) -> float:
        """Samples per merged trajectory (0.0 with none)."""
        return self.samples / self.episodes if self.episodes else 0.0

    def breaks_by_reason(self) -> dict[str, int]:
        """Break counts for every reason in `BREAK_REASONS` (zeros included, so metrics keep their keys)."""
        counts = Counter(b.reason for b in self.breaks)
        return {reason: counts[reason] for reason in BREAK_REASONS}

    def __add__(self, other: MergeReport) -> MergeReport:
        """Field by field: counts add up, the breaks of both follow each other."""
        return MergeReport(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


@dataclass
class _Builder:
    agent: str
    index: int
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)
    spans: list[tuple[int, int, int]] = field(default_factory=list)

    def add(self, call: LLMCall, start: int) -> None:
        """Append `call`'s prompt from position `start` (mask 0), then its response (mask 1)."""
        new_prompt = len(call.prompt_ids) - start
        self.ids.extend(call.prompt_ids[start:])
        self.mask.extend([0] * new_prompt)
        begin = len(self.ids)
        self.ids.extend(call.response_ids)
        self.mask.extend([1] * len(call.response_ids))
        if self.logprobs is not None:
            if call.response_logprobs is None:
                self.logprobs = None
            else:
                self.logprobs.extend([0.0] * new_prompt)
                self.logprobs.extend(call.response_logprobs)
        self.calls.append(call)
        self.spans.append((begin, len(self.ids), call.index))


def merge_calls(
    calls: Sequence[LLMCall],
    *,
    merge: bool = True,
    trainable_targets: Collection[str] | None = None,
    trajectory_id: str = "",
    group_id: str = "",
) -> tuple[list[Sample], MergeReport]:
    """Turn calls into samples.

    Calls that are not trainable or generated nothing are skipped, as are
    calls of agents outside `trainable_targets` (None: every agent). With
    `merge=False` every call is its own sample (and no break is recorded).
    Samples come in the order of their first call; `advantages` are zeros
    until computed.
    """
    report = MergeReport(episodes=1)
    builders: list[_Builder] = []
    latest: dict[str, _Builder] = {}  # per agent, the sample that took its last call
    for call in calls:
        if not call.trainable or not call.response_ids:
            continue
        if trainable_targets is not None and call.agent_name not in trainable_targets:
            continue
        report.calls += 1
        report.tokens_unmerged += len(call.prompt_ids) + len(call.response_ids)
        report.generated_tokens += len(call.response_ids)
        report.drifts += call.drift
        target = _find_prefix(builders, call) if merge else None
        if target is None:
            previous = latest.get(call.agent_name)
            if merge and previous is not None:
                report.breaks.append(prefix_break(previous, call, trajectory_id))
            target = _Builder(call.agent_name, len(builders))
            builders.append(target)
            target.add(call, 0)
        else:
            target.add(call, len(target.ids))
        latest[call.agent_name] = target
    samples = [
        Sample(
            trajectory_id=trajectory_id,
            group_id=group_id,
            agent_name=b.agent,
            input_ids=b.ids,
            loss_mask=b.mask,
            old_logprobs=b.logprobs,
            advantages=[0.0] * len(b.ids),
            call_indices=[c.index for c in b.calls],
            response_spans=b.spans,
            response_sampling=[c.sampling for c in b.calls],
        )
        for b in builders
    ]
    report.samples = len(samples)
    report.tokens_trained = sum(len(b.ids) for b in builders)
    return samples, report


def _find_prefix(builders: list[_Builder], call: LLMCall) -> _Builder | None:
    prompt = call.prompt_ids
    # Most recent first: in a linear conversation the last sample is the one extended.
    for b in reversed(builders):
        n = len(b.ids)
        if b.agent == call.agent_name and len(prompt) >= n and prompt[:n] == b.ids:
            return b
    return None


def merge_trajectory(
    trajectory: Trajectory,
    *,
    merge: bool = True,
    trainable_targets: Collection[str] | None = None,
) -> tuple[list[Sample], MergeReport]:
    """`merge_calls` over a trajectory's calls, tagging samples with its ids.

    A trajectory whose workflow raised (`error` set) yields no samples.
    """
    if trajectory.error is not None:
        return [], MergeReport()
    return merge_calls(
        trajectory.calls,
        merge=merge,
        trainable_targets=trainable_targets,
        trajectory_id=trajectory.trajectory_id,
        group_id=trajectory.group_id,
    )
