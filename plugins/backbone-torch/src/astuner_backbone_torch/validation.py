"""Validation: the policy on the validation split with `rollout.val_kwargs` (greedy by default)."""

from __future__ import annotations

from collections.abc import Sequence

from astuner.api import Task, Trajectory
from astuner.training import (
    AstunerConfig,
    ExperimentDir,
    RolloutRunner,
    append_trajectories,
    pass_at_k,
    rollout_metrics,
    sampling_from_config,
)


async def validate(
    runner: RolloutRunner,
    tasks: Sequence[Task],
    config: AstunerConfig,
    experiment: ExperimentDir,
    step: int,
) -> tuple[dict[str, float], list[Trajectory]]:
    """Run every validation task `val_kwargs.num_repeat` times and score the runs.

    Metrics: `val/reward_mean`, `val/success_rate` (and the other
    `rollout_metrics`), and `val/pass@k` with `k = min(val_pass_n, num_repeat)`.
    Trajectories go to `rollouts/val_step_<step>.jsonl`.
    """
    repeats = config.rollout.val_kwargs.num_repeat
    trajectories = await runner.run(
        list(tasks), sampling_from_config(config, validation=True), repeats, tag=f"val{step}"
    )
    append_trajectories(experiment.rollouts / f"val_step_{step}.jsonl", trajectories)
    metrics = rollout_metrics(trajectories, "val")
    k = min(config.trainer_common.val_pass_n, repeats)
    metrics[f"val/pass@{k}"] = pass_at_k(trajectories, k)
    return metrics, trajectories
