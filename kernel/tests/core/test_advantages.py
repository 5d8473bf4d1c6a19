"""Advantage estimators against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from astuner.core import advantages
from astuner.core.advantages import compute_advantages, discounted_returns, zero_variance_groups
from astuner.core.merge import merge_trajectory
from astuner.core.trajectory import LLMCall, Trajectory


def _traj(tid, group, reward, n_calls=1, error=None):
    calls = []
    prompt = [1, 2]
    for i in range(n_calls):
        calls.append(LLMCall(index=i, prompt_ids=list(prompt), response_ids=[10 + i, 2]))
        prompt = [*prompt, 10 + i, 2, 3]
    return Trajectory(trajectory_id=tid, group_id=group, reward=reward, calls=calls, error=error)


def _run(trajs, **kw):
    samples = [s for t in trajs for s in merge_trajectory(t)[0]]
    return compute_advantages(trajs, samples, **kw)


def _adv(estimator, scores, groups):
    base, scale = getattr(advantages, estimator)(np.array(scores, dtype=float), np.array(groups), 1e-6)
    return (np.array(scores) - base) / scale


def test_hand_computed_values():
    r = [1.0, 0.0, 0.0, 1.0]
    g = [0, 0, 0, 0]
    # mean 0.5, unbiased std sqrt(1/3): (1 - 0.5) / 0.57735 = 0.866
    assert _adv("grpo", r, g) == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], 1e-5)
    assert _adv("dr_grpo", r, g) == pytest.approx([0.5, -0.5, -0.5, 0.5])
    # leave one out: 1 - 1/3, 0 - 2/3
    assert _adv("rloo", r, g) == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # two groups; REINFORCE++ whitens over the whole batch
    r2, g2 = [1.0, 0.0, 3.0, 3.0], [0, 0, 1, 1]
    std = np.std(r2, ddof=1)
    assert _adv("reinforce_pp", r2, g2) == pytest.approx((np.array(r2) - 1.75) / std, 1e-5)
    c = np.array([0.5, -0.5, 0.0, 0.0])
    expect = c / c.std(ddof=1)
    assert _adv("reinforce_pp_baseline", r2, g2) == pytest.approx(expect, 1e-5)
    assert _adv("grpo", r2, g2)[2:] == pytest.approx([0.0, 0.0])


def test_singleton_groups_get_zero():
    for name in ("grpo", "dr_grpo", "rloo"):
        assert _adv(name, [5.0], [0]) == pytest.approx([0.0])


def test_equal_rewards_give_zeros_and_are_reported():
    trajs = [
        _traj("a", "g1", 1.0),
        _traj("b", "g1", 1.0),
        _traj("c", "g2", 1.0),
        _traj("d", "g2", 0.0),
    ]
    report = _run(trajs)
    assert report.zero_variance_groups == ["g1"]
    assert report.step_advantages["a"] == [0.0] and report.step_advantages["b"] == [0.0]
    # mean 0.5, unbiased std sqrt(0.5)
    assert report.step_advantages["c"][0] == pytest.approx(0.5 / math.sqrt(0.5), 1e-5)
    dropped = _run(trajs, drop_zero_variance=True)
    assert [s.trajectory_id for s in dropped.samples] == ["c", "d"] and dropped.dropped_samples == 2


def test_broadcast_to_generated_tokens_only():
    trajs = [_traj("a", "g", 1.0, n_calls=3), _traj("b", "g", 0.0, n_calls=3)]
    report = _run(trajs, estimator=advantages.dr_grpo)
    s = report.samples[0]
    assert s.call_indices == [0, 1, 2]
    assert s.advantages == [0.5 if m else 0.0 for m in s.loss_mask]


def test_per_step_rewards_with_gamma():
    assert discounted_returns([0.0, 0.0, 1.0], 0.5).tolist() == [0.25, 0.5, 1.0]
    trajs = [_traj("a", "g", [0.0, 0.0, 1.0], n_calls=3), _traj("b", "g", [0.0, 0.0, 0.0], 3)]
    report = _run(trajs, estimator=advantages.dr_grpo, gamma=0.5)
    # baseline = mean of returns-from-start = (0.25 + 0) / 2
    assert report.step_advantages["a"] == pytest.approx([0.125, 0.375, 0.875])
    assert report.step_advantages["b"] == pytest.approx([-0.125] * 3)
    s = report.samples[0]
    per_span = [s.advantages[start] for start, _, _ in s.response_spans]
    assert per_span == pytest.approx([0.125, 0.375, 0.875])
    with pytest.raises(ValueError, match="2 step rewards for 3 steps"):
        _run([_traj("c", "g", [1.0, 1.0], n_calls=3)])


def test_unscored_trajectories_are_not_trained():
    trajs = [_traj("a", "g", 1.0), _traj("b", "g", None), _traj("c", "g", 0.0, error="boom")]
    samples = [s for t in trajs[:2] for s in merge_trajectory(t)[0]]
    report = compute_advantages(trajs, samples)
    assert [s.trajectory_id for s in report.samples] == ["a"] and report.dropped_samples == 1
    assert compute_advantages([trajs[1]], samples[1:]).dropped_samples == 1


def test_zero_variance_helper_finds_groups_of_equal_scores():
    flat = zero_variance_groups(np.array([1.0, 1.0, 0.0, 2.0]), np.array([0, 0, 1, 1]))
    assert flat.tolist() == [True, False]


def _game(tid: str, rewards: dict[str, float], agents=("wolf", "seer", "villager"), untrained=()):
    """One call per agent, each with its own prompt (a separate sample each)."""
    calls = [
        LLMCall(
            index=i,
            agent_name=a,
            prompt_ids=[1, 2 + i],
            response_ids=[10 + i, 2],
            trainable=a not in untrained,
        )
        for i, a in enumerate(agents)
    ]
    return Trajectory(trajectory_id=tid, group_id="g", reward=0.0, agent_rewards=rewards, calls=calls)


def test_per_agent_rewards_are_grouped_per_agent_across_the_repeats():
    games = [
        _game("a", {"wolf": 1.0, "seer": 0.0, "villager": 5.0}),
        _game("b", {"wolf": 0.0, "seer": 0.0, "villager": 1.0}),
    ]
    report = _run(games, estimator=advantages.dr_grpo)
    by_agent = {(s.trajectory_id, s.agent_name): max(s.advantages, key=abs) for s in report.samples}
    # each agent's baseline is its own mean over the two games, never the other agents'
    assert by_agent == {
        ("a", "wolf"): 0.5,
        ("b", "wolf"): -0.5,
        ("a", "villager"): 2.0,
        ("b", "villager"): -2.0,
        ("a", "seer"): 0.0,
        ("b", "seer"): 0.0,
    }
    # the seer's rewards are equal: a zero-variance group of its own, its samples carry 0
    assert report.zero_variance_groups == ["g/seer"] and report.groups == 3
    assert report.step_advantages["a"] == [0.5, 0.0, 2.0]
    dropped = _run(games, estimator=advantages.dr_grpo, drop_zero_variance=True)
    assert {s.agent_name for s in dropped.samples} == {"wolf", "villager"} and dropped.dropped_samples == 2


def test_an_agent_without_trainable_calls_is_skipped_and_unrewarded_calls_are_not_trained():
    games = [
        _game("a", {"wolf": 1.0, "seer": 3.0}, untrained=("seer",)),
        _game("b", {"wolf": 0.0, "seer": 1.0}, untrained=("seer",)),
    ]
    report = _run(games, estimator=advantages.dr_grpo)
    assert {s.agent_name for s in report.samples} == {"wolf"}
    assert report.zero_variance_groups == []
    # the villager had trainable calls but no reward: its samples are left out, not trained at 0
    assert report.dropped_samples == 2
