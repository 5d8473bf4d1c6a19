"""Validation: the policy on the validation split with `rollout.val_kwargs` (greedy by default)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from astuner.api import SamplingParams, Task, Trajectory
from astuner.training import (
    ExperimentDir,
    RolloutRunner,
    pass_at_k,
    rollout_metrics,
)


@dataclass(frozen=True)
class ValidationSettings:
    """How a validation samples and scores (`translate.validation_settings`): `sampling` from
    `rollout.val_kwargs`, `repeats` its `num_repeat`, `pass_n` `trainer_common.val_pass_n`."""

    sampling: SamplingParams
    repeats: int
    pass_n: int


async def validate(
    runner: RolloutRunner,
    tasks: Sequence[Task],
    settings: ValidationSettings,
    experiment: ExperimentDir,
    step: int,
) -> tuple[dict[str, float], list[Trajectory]]:
    """Run every validation task `settings.repeats` times and score the runs.

    Metrics: `val/reward_mean`, `val/success_rate` (and the other
    `rollout_metrics`), and `val/pass@k` with `k = min(pass_n, repeats)`.
    Trajectories go to `rollouts/val_step_<step>.jsonl`, each as its run ends.
    """
    repeats = settings.repeats
    record = experiment.rollouts / f"val_step_{step}.jsonl"
    trajectories = await runner.run(list(tasks), settings.sampling, repeats, tag=f"val{step}", record=record)
    metrics = rollout_metrics(trajectories, "val")
    k = min(settings.pass_n, repeats)
    metrics[f"val/pass@{k}"] = pass_at_k(trajectories, k)
    return metrics, trajectories
