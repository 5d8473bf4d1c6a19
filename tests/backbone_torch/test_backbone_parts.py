"""Backbone pieces that need no model: estimator names, the task stream, metrics."""

import pytest

pytest.importorskip("torch")

from astuner_backbone_torch.backbone import estimator_name
from astuner_backbone_torch.data import TaskStream
from astuner_backbone_torch.metrics import pass_at_k, rollout_metrics

from astuner.config import load_config
from astuner.core.task import Task
from astuner.core.trajectory import Trajectory
from astuner.errors import ConfigError


def test_multi_step_grpo_is_grpo_and_unknown_estimators_are_named() -> None:
    config = load_config(None, ["trainer_common.algorithm.adv_estimator=multi_step_grpo"], environ={})
    assert estimator_name(config) == "grpo"
    config.trainer_common.algorithm.adv_estimator = "rloo"
    assert estimator_name(config) == "rloo"
    config.trainer_common.algorithm.adv_estimator = "gpro"
    with pytest.raises(ConfigError, match=r"adv_estimator.*'gpro'.*multi_step_grpo"):
        estimator_name(config)


def test_task_stream_is_seeded_covers_each_epoch_and_resumes_from_its_position() -> None:
    tasks = [Task(task_id=str(i)) for i in range(10)]
    stream = TaskStream(tasks, batch_size=3, seed=1)
    assert stream.batches_per_epoch == 3
    epoch = [t.task_id for _ in range(3) for t in stream.next_batch()]
    assert len(set(epoch)) == 9  # one epoch: distinct tasks, the tenth left for a later epoch
    state = stream.state_dict()
    following = [[t.task_id for t in stream.next_batch()] for _ in range(4)]
    again = TaskStream(tasks, batch_size=3, seed=1)
    again.load_state_dict(state)
    assert [[t.task_id for t in again.next_batch()] for _ in range(4)] == following
    other_seed = TaskStream(tasks, batch_size=3, seed=2)
    assert [t.task_id for t in other_seed.next_batch()] != epoch[:3]
    assert len(TaskStream(tasks[:2], batch_size=8, seed=0).next_batch()) == 2


def _traj(
    group: str, reward: float | None, success: bool | None = None, error: str | None = None
) -> Trajectory:
    return Trajectory(
        trajectory_id=f"{group}-{reward}", group_id=group, reward=reward, is_success=success, error=error
    )


def test_rollout_metrics_and_pass_at_k() -> None:
    runs = [
        _traj("a", 1.0, True),
        _traj("a", 0.0, False),
        _traj("b", 0.0, False),
        _traj("b", None, error="boom"),
    ]
    metrics = rollout_metrics(runs, "val")
    assert metrics["val/reward_mean"] == pytest.approx(1 / 3)
    assert metrics["val/success_rate"] == 0.25
    assert metrics["val/error_rate"] == 0.25
    assert pass_at_k(runs, 1) == pytest.approx(0.25)  # group a: 1/2, group b: 0
    assert pass_at_k(runs, 2) == pytest.approx(0.5)  # group a: certain with two tries
