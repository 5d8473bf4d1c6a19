"""Advantage estimators over groups of trajectories (runs of the same task).

Every estimator is a pure function of the batch's scores and group
membership that returns a baseline and a scale per trajectory:

    estimator(scores: (B,), group: (B,) int, eps) -> (baseline: (B,), scale: (B,))

and the advantage of trajectory i is `(x - baseline[i]) / scale[i]`, where
`x` is its score, or, with per-step rewards, the discounted return of each
step. The built-in estimators (`trainer_common.algorithm.adv_estimator`):

- `grpo`: group mean and (unbiased) group standard deviation.
- `dr_grpo`: group mean only, no division (Dr. GRPO).
- `rloo`: leave-one-out mean of the rest of the group, no division.
- `reinforce_pp`: REINFORCE++: whitening by the mean and standard deviation
  of the whole batch, groups ignored.
- `reinforce_pp_baseline`: group mean subtracted, then divided by the
  standard deviation of those centred scores over the whole batch.

They are plugins like any other estimator: the kernel's default plugin
`astuner.default_plugins.algorithms` registers them with their aliases and
their counterparts in verl and Trinity, and a run finds the one its config
names through `astuner.algorithms.advantage_estimator`.

`compute_advantages` applies one to trajectories and writes the result onto
their samples' generated tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from astuner.core.targets import untrainable_step_error
from astuner.core.trajectory import Sample, Trajectory
from astuner.errors import ConfigError

Estimator = Callable[[np.ndarray, np.ndarray, float], tuple[np.ndarray, np.ndarray]]


def group_stats(scores: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-trajectory statistics of its group.

    scores: (B,) float; group: (B,) int in [0, G).
    Returns (mean, std, count), each (B,): the mean, the unbiased standard
    deviation (0 for a group of one) and the size of trajectory i's group.
    """
    counts = np.bincount(group)
    sums = np.bincount(group, weights=scores)
    means = sums / counts
    centred = scores - means[group]
    sq = np.bincount(group, weights=centred**2)
    std = np.sqrt(np.divide(sq, counts - 1, out=np.zeros_like(sq), where=counts > 1))
    return means[group], std[group], counts[group].astype(np.float64)


def grpo(scores: np.ndarray, group: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """GRPO: A_i = (r_i - mean_g) / (std_g + eps). Shapes (B,) -> ((B,), (B,))."""
    mean, std, _ = group_stats(scores, group)
    return mean, std + eps


def dr_grpo(scores: np.ndarray, group: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Dr. GRPO: A_i = r_i - mean_g (dividing by std biases towards easy/hard groups)."""
    mean, _, _ = group_stats(scores, group)
    return mean, np.ones_like(scores)


def rloo(scores: np.ndarray, group: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """RLOO: A_i = r_i - mean of the other n_g - 1 scores of the group.

    A trajectory alone in its group has no baseline and gets A_i = 0.
    """
    mean, _, count = group_stats(scores, group)
    sums = mean * count
    others = np.divide(sums - scores, count - 1, out=scores.copy(), where=count > 1)
    return others, np.ones_like(scores)


def reinforce_pp(scores: np.ndarray, group: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """REINFORCE++: A_i = (r_i - mean_batch) / (std_batch + eps); no group baseline."""
    std = scores.std(ddof=1) if scores.size > 1 else 0.0
    return np.full_like(scores, scores.mean()), np.full_like(scores, std + eps)


def reinforce_pp_baseline(scores: np.ndarray, group: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """REINFORCE++ with a group baseline: c_i = r_i - mean_g, A_i = c_i / (std_batch(c) + eps)."""
    mean, _, _ = group_stats(scores, group)
    centred = scores - mean
    std = centred.std(ddof=1) if scores.size > 1 else 0.0
    return mean, np.full_like(scores, std + eps)


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """Return-to-go of per-step rewards: G_k = sum_{j>=k} gamma^(j-k) r_j. (T,) -> (T,)."""
    out = np.zeros(len(rewards))
    acc = 0.0
    for k in range(len(rewards) - 1, -1, -1):
        acc = rewards[k] + gamma * acc
        out[k] = acc
    return out


def zero_variance_groups(scores: np.ndarray, group: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """(B,) scores, (B,) group -> (G,) bool: the groups whose scores are all equal."""
    n = int(group.max()) + 1 if group.size else 0
    hi = np.full(n, -np.inf)
    lo = np.full(n, np.inf)
    np.maximum.at(hi, group, scores)
    np.minimum.at(lo, group, scores)
    return (hi - lo) <= tol


@dataclass
class AdvantageReport:
    """The outcome of `compute_advantages`.

    `samples`: the samples kept, with `advantages` filled in;
    `step_advantages`: per trajectory id, the advantage of each of its
    steps (trainable calls that generated tokens), in call order;
    `groups`: how many groups the estimator saw (with per-agent rewards,
    one per task and agent); `zero_variance_groups`: the group ids among
    them whose scores were all equal (with per-agent rewards, `<group_id>/<agent>`);
    `dropped_samples`: samples left out (unscored trajectories, calls of
    agents the judge gave no reward, and zero-variance groups when dropping them).
    """

    samples: list[Sample] = field(default_factory=list)
    step_advantages: dict[str, list[float]] = field(default_factory=dict)
    groups: int = 0
    zero_variance_groups: list[str] = field(default_factory=list)
    dropped_samples: int = 0


@dataclass
class _Unit:
    """What one score is estimated for: a whole trajectory, or one agent's calls in it."""

    trajectory: Trajectory
    group: str
    steps: list[int]
    returns: np.ndarray
    per_step: bool


def _steps(traj: Trajectory, agent: str | None = None) -> list[int]:
    return [
        c.index
        for c in traj.calls
        if c.trainable and c.response_ids and (agent is None or c.agent_name == agent)
    ]


def _units(trajectory: Trajectory, gamma: float) -> list[_Unit]:
    """A trajectory's scores: one per agent with a reward of its own (agents without trainable
    calls are left out), else one for the whole run."""
    if trajectory.agent_rewards:
        return [
            _Unit(trajectory, f"{trajectory.group_id}/{agent}", steps, np.array([float(reward)]), False)
            for agent, reward in sorted(trajectory.agent_rewards.items())
            if (steps := _steps(trajectory, agent))
        ]
    reward, steps = trajectory.reward, _steps(trajectory)
    if isinstance(reward, list):
        if len(reward) != len(steps):
            raise ValueError(
                f"trajectory {trajectory.trajectory_id}: {len(reward)} step rewards for {len(steps)} steps"
            )
        return [_Unit(trajectory, trajectory.group_id, steps, discounted_returns(reward, gamma), True)]
    return [_Unit(trajectory, trajectory.group_id, steps, np.array([float(reward or 0.0)]), False)]


def compute_advantages(
    trajectories: Sequence[Trajectory],
    samples: Sequence[Sample],
    *,
    estimator: Estimator = grpo,
    gamma: float = 1.0,
    drop_zero_variance: bool = False,
    eps: float = 1e-6,
) -> AdvantageReport:
    """Score trajectories, estimate advantages per group, and broadcast them to tokens.

    A float reward gives one advantage for all the trajectory's generated
    tokens. A list reward holds one reward per step (trainable call with
    generated tokens, in order); the group statistics use each trajectory's
    return from its first step, and step k's tokens get
    `(G_k - baseline) / scale`. Per-agent rewards (`Trajectory.agent_rewards`)
    score each agent's calls on their own, grouped per agent: agent `a`'s
    baseline comes from agent `a`'s rewards in the other runs of the task.
    Trajectories that raised or have no reward are not trained. `estimator`
    is the function (`astuner.algorithms.advantage_estimator` finds the one
    a config names). Raises
    ValueError when a reward list does not have one entry per step, and
    ConfigError when no sample is left because no trainable target called
    (`astuner.core.targets`).
    """
    untrainable = untrainable_step_error(trajectories, samples)
    if untrainable is not None:
        raise ConfigError(untrainable)
    scored = [t for t in trajectories if t.error is None and t.reward is not None]
    units = [unit for t in scored for unit in _units(t, gamma)]
    report = AdvantageReport()
    if not units:
        report.dropped_samples = len(samples)
        return report
    group_ids = sorted({u.group for u in units})
    report.groups = len(group_ids)
    index = {g: i for i, g in enumerate(group_ids)}
    group = np.array([index[u.group] for u in units], dtype=np.int64)
    scores = np.array([u.returns[0] if u.returns.size else 0.0 for u in units], dtype=np.float64)
    baseline, scale = estimator(scores, group, eps)
    flat = zero_variance_groups(scores, group)
    report.zero_variance_groups = [g for g in group_ids if flat[index[g]]]
    dropped_groups = set(report.zero_variance_groups) if drop_zero_variance else set()
    per_call: dict[str, dict[int, float]] = {}
    kept: dict[str, set[int]] = {}  # per trajectory, the calls whose group is trained
    for i, unit in enumerate(units):
        adv = (unit.returns - baseline[i]) / scale[i]
        values = adv if unit.per_step else np.full(len(unit.steps), adv[0])
        trajectory_id = unit.trajectory.trajectory_id
        per_call.setdefault(trajectory_id, {}).update(zip(unit.steps, values.tolist(), strict=True))
        if unit.group not in dropped_groups:
            kept.setdefault(trajectory_id, set()).update(unit.steps)
    for t in scored:
        advs = per_call.get(t.trajectory_id, {})
        report.step_advantages[t.trajectory_id] = [advs[c] for c in _steps(t) if c in advs]
    for s in samples:
        advs, trained = per_call.get(s.trajectory_id, {}), kept.get(s.trajectory_id, set())
        if not s.response_spans or any(call not in trained for _, _, call in s.response_spans):
            report.dropped_samples += 1
            continue
        values = [0.0] * len(s.input_ids)
        for start, end, call_index in s.response_spans:
            values[start:end] = [advs[call_index]] * (end - start)
        s.advantages = values
        report.samples.append(s)
    return report
