"""One astuner workflow run inside another engine's worker (verl, Trinity-RFT).

Those engines own the loop and the model; astuner supplies, per task, the
user's workflow, judge and madness checks and turns the recorded calls into
training samples. `EpisodeSource` loads the resolved astuner config and the
installed plugins once per process and runs one episode at a time through
the same rollout stack as the other backbones, with the engine the caller
hands it (an adapter over the foreign engine's token-in/token-out call).
The auxiliary models of the config are built on the first episode and
kept for every later one, for the life of the worker process.

Those engines show their own step progress; what they cannot show is the
workers' side, so each worker logs, at most every `PROGRESS_EVERY_S`, its
rollouts done, generated tokens per second and mean reward (Ray forwards
the line to the driver's console).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from astuner.config import AstunerConfig, load_config
from astuner.core.merge import merge_trajectory
from astuner.core.task import Task
from astuner.core.trajectory import Sample, Trajectory
from astuner.errors import AstunerError
from astuner.logs import get_logger
from astuner.plugins import Plugins
from astuner.rollout.auxiliary import AuxiliaryModel, build_auxiliary_models
from astuner.rollout.engine import SamplingParams
from astuner.rollout.stack import rollout_stack

CONFIG_ENV = "ASTUNER_CONFIG"
SEARCH_PATHS_ENV = "ASTUNER_SEARCH_PATHS"
PROGRESS_EVERY_S = 30.0


class EpisodeSource:
    """The astuner side of a foreign engine's worker: config, plugins, one run at a time."""

    _shared: ClassVar[dict[tuple[str, tuple[str, ...]], EpisodeSource]] = {}

    def __init__(self, config: AstunerConfig, plugins: Plugins) -> None:
        self.config = config
        self.plugins = plugins
        self.auxiliary: dict[str, AuxiliaryModel] | None = None
        self.progress = WorkerProgress()

    @classmethod
    def shared(cls, config_path: str | None, search_paths: Sequence[str] | None = None) -> EpisodeSource:
        """The process-wide source for a config file (`ASTUNER_CONFIG` when None).

        `search_paths` (or `ASTUNER_SEARCH_PATHS`, os.pathsep-separated) go
        on `sys.path` first: the user's workflow module is found there.
        """
        path = config_path or os.environ.get(CONFIG_ENV)
        if not path:
            raise AstunerError(
                f"No astuner config for this worker: pass its path, or set {CONFIG_ENV} to the "
                "config.yaml of the experiment folder."
            )
        if search_paths is None:
            search_paths = [p for p in os.environ.get(SEARCH_PATHS_ENV, "").split(os.pathsep) if p]
        key = (path, tuple(search_paths))
        if key not in cls._shared:
            for folder in reversed(search_paths):
                if folder not in sys.path:
                    sys.path.insert(0, folder)
            cls._shared[key] = cls(load_config(path), Plugins())
        return cls._shared[key]

    async def run(
        self, task: Task, engine: Any, sampling: SamplingParams, *, group_id: str = "", repeat: int = 0
    ) -> tuple[Trajectory, list[Sample]]:
        """Run the workflow once on `task` through `engine`; the trajectory and its merged samples."""
        if self.auxiliary is None:
            self.auxiliary = build_auxiliary_models(self.config, self.plugins)
        async with rollout_stack(
            self.config, self.plugins, engine=engine, max_parallel=1, auxiliary=self.auxiliary
        ) as runner:
            trajectory = await runner.run_one(task, group_id or task.task_id, repeat, sampling)
            targets = runner.workflow.trainable_targets or None
        samples, _ = merge_trajectory(trajectory, trainable_targets=targets)
        self.progress.add(trajectory)
        return trajectory, samples


class WorkerProgress:
    """Rollouts done in this worker process, generated tokens per second, mean reward; logged at most
    every `PROGRESS_EVERY_S` seconds."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.logged = 0.0
        self.done = 0
        self.tokens = 0
        self.reward = 0.0

    def add(self, trajectory: Trajectory) -> None:
        now = time.perf_counter()
        if self.started is None:
            self.started = now - (trajectory.timings.get("total_s", 0.0) if trajectory.timings else 0.0)
        self.done += 1
        self.tokens += sum(len(call.response_ids) for call in trajectory.calls)
        self.reward += reward_of(trajectory)
        if now - self.logged >= PROGRESS_EVERY_S:
            self.logged = now
            get_logger().info(
                "rollouts in this worker",
                worker=os.getpid(),
                done=self.done,
                tokens_per_s=round(self.tokens / max(now - self.started, 1e-9), 1),
                mean_reward=round(self.reward / self.done, 4),
            )


def reward_of(trajectory: Trajectory) -> float:
    """One number for the whole run: the reward, per-step rewards summed, 0 when unjudged."""
    reward = trajectory.reward
    if isinstance(reward, list):
        return float(sum(reward))
    return float(reward) if reward is not None else 0.0
