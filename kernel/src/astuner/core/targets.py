"""Trainable targets that never call.

Only the calls of the agents `rollout.trainable_targets` names train (else
the workflow's `trainable_targets`; none named: every agent). A name that
matches no agent of the workflow (a typo, or an agent that calls under
another name) trained nothing, and nothing said so: 0 samples, exit 0.

The runner now warns after each `run()` about every target that made no
model call in its rollouts, naming the agents that did call
(`idle_targets_warning`); a run on one target among several still trains
the others, and an agent may call only in some steps, so that is a warning.
A verl or Trinity worker, which sees episodes one at a time, warns the same
way once its first `astuner.rollout.episode.IDLE_AFTER` episodes are done.
A training step whose generated calls were all left out by the targets has
nothing at all to train on: `compute_advantages` raises the
`ConfigError` of `untrainable_step_error`, since a run that trains nothing
should fail on its first step rather than run every step for nothing and
exit 0. The runner records the targets each trajectory's calls were marked
by under `TARGETS_KEY` in its metadata (the rollout records show them too).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from astuner.core.trajectory import Trajectory

TARGETS_KEY = "trainable_targets"
"""`Trajectory.metadata` key: the targets the runner marked this run's calls by."""


def generated_calls(trajectories: Sequence[Trajectory]) -> Counter[str]:
    """The model calls that generated tokens, per agent, most first."""
    return Counter(call.agent_name for t in trajectories for call in t.calls if call.response_ids)


def idle_targets_warning(called: Counter[str], rollouts: int, targets: Sequence[str], key: str) -> str | None:
    """The warning for targets (from config `key`) that made no call in `rollouts` rollouts whose
    generated calls per agent are `called`; None if every target called.

    Nothing is said when no agent called at all (every rollout failed before its first call): that
    says nothing about the names.
    """
    idle = [name for name in targets if name not in called]
    if not targets or not called or not idle:
        return None
    silent = "No call of these rollouts trains. " if len(idle) == len(targets) else ""
    return (
        f"{key} names {_names(idle)}, which made no model call in these {rollouts} rollouts, "
        f"so {'it trains' if len(idle) == 1 else 'they train'} nothing; the agents that called: "
        f"{_counts(called)}. {silent}{_fix(key)}"
    )


def untrainable_step_error(trajectories: Sequence[Trajectory], samples: Sequence[object]) -> str | None:
    """The error of a training step left with no sample because no trainable target called."""
    if samples:
        return None
    scored = [t for t in trajectories if t.error is None and t.reward is not None]
    targets = sorted({name for t in scored for name in t.metadata.get(TARGETS_KEY, [])})
    called = generated_calls(scored)
    if not targets or not called or any(name in called for name in targets):
        return None
    return (
        f"Nothing to train in this step: rollout.trainable_targets (or the workflow's "
        f"trainable_targets) names {_names(targets)}, which made no model call in the step's "
        f"{len(scored)} judged rollouts; every call came from other agents ({_counts(called)}) and was "
        f"left out, so the step has no sample and the run would train nothing. "
        f"{_fix('rollout.trainable_targets')}"
    )


def _fix(key: str) -> str:
    return (
        f"Name the agents in {key} as the workflow calls them (an AgentScope agent's name, or "
        f"model_tuner.for_agent(name)), or leave {key} empty to train every agent."
    )


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


def _counts(called: Counter[str]) -> str:
    return ", ".join(f"'{name}' ({n} call{'s' if n != 1 else ''})" for name, n in called.most_common())
