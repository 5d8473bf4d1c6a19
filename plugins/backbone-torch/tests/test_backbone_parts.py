"""Backbone pieces that need no model: the chosen estimator, the task stream."""

import pytest

pytest.importorskip("torch")

from astuner_backbone_torch.backbone import chosen_estimator
from astuner_backbone_torch.data import TaskStream

from astuner.config import load_config
from astuner.core import advantages
from astuner.core.task import Task
from astuner.errors import ConfigError
from astuner.plugins import Plugins


def test_multi_step_grpo_is_grpo_and_unknown_estimators_are_named() -> None:
    plugins = Plugins(load_entry_points=False)
    config = load_config(None, ["trainer_common.algorithm.adv_estimator=multi_step_grpo"], environ={})
    assert chosen_estimator(config, plugins) is advantages.grpo
    config.trainer_common.algorithm.adv_estimator = "rloo"
    assert chosen_estimator(config, plugins) is advantages.rloo
    config.trainer_common.algorithm.adv_estimator = "gpro"
    with pytest.raises(ConfigError, match=r"adv_estimator.*'gpro'.*multi_step_grpo"):
        chosen_estimator(config, plugins)


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
