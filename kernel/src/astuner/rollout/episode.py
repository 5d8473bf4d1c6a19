"""One astuner workflow run inside another engine's worker (verl, Trinity-RFT).

Those engines own the loop and the model; astuner supplies, per task, the
user's workflow, judge and madness checks and turns the recorded calls into
training samples. `EpisodeSource` loads the resolved astuner config and the
installed plugins once per process and runs one episode at a time through
the same rollout stack as the other backbones, with the engine the caller
hands it (an adapter over the foreign engine's token-in/token-out call).

Lifetimes. verl and Trinity instantiate their agent loop / workflow class
for every task, in their own worker processes, so the stack cannot live on
that object. `EpisodeSource.shared` keeps one source per worker process and
config file; its parts (workflow, judge, madness checks, environment maker,
tokenizer, auxiliary models) are built on the first episode and serve every
later one until the process ends, which is also what closes them. The
gateway serves from an event loop, so each loop an episode runs on gets its
own gateway and runner over those parts: verl's agent-loop worker and
Trinity's runner actor keep one loop for their life; Trinity's
multi-threading mode (and `asyncio.run` in tests) makes one per run, and
that loop's shutdown stops its gateway.

Those engines show their own step progress; what they cannot show is the
workers' side, so each worker logs, at most every `PROGRESS_EVERY_S`, its
rollouts done, generated tokens per second and mean reward (Ray forwards
the line to the driver's console).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

from astuner.components import build_auxiliary_engine
from astuner.config import AstunerConfig, load_config
from astuner.core.merge import merge_trajectory
from astuner.core.targets import generated_calls
from astuner.core.task import Task
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.trajectory import Sample, Trajectory
from astuner.errors import AstunerError
from astuner.logs import get_logger
from astuner.plugins import Plugins
from astuner.rollout.auxiliary import AuxiliaryModel, build_auxiliary_models
from astuner.rollout.engine import SamplingParams
from astuner.rollout.gateway import Gateway
from astuner.rollout.runner import RolloutRunner
from astuner.rollout.stack import RolloutParts, engine_tokenizer

CONFIG_ENV = "ASTUNER_CONFIG"
SEARCH_PATHS_ENV = "ASTUNER_SEARCH_PATHS"
PROGRESS_EVERY_S = 30.0
IDLE_AFTER = 8
"""After this many episodes, a worker warns about trainable targets that made no call in any of them
(`astuner.core.targets`): one episode proves little, as an agent may call only on some tasks."""


class EpisodeSource:
    """The astuner side of a foreign engine's worker: config, plugins, one rollout stack, a run at a time.

    It is the verl and Trinity backbones' entry point in their worker processes (`shared` loads the
    run's config there), so it holds the whole config, as `astuner.rollout.stack` does in the driver.
    """

    _shared: ClassVar[dict[tuple[str, tuple[str, ...]], EpisodeSource]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, config: AstunerConfig, plugins: Plugins) -> None:
        self.config = config
        self.plugins = plugins
        self.parts: RolloutParts | None = None
        self.tokenizer: ChatTokenizer | None = None
        self.auxiliary: dict[str, AuxiliaryModel] = {}
        self.progress = WorkerProgress()
        # Trinity's multi-threading mode runs episodes on several threads' loops at once.
        self._lock = threading.Lock()
        self._loops: dict[asyncio.AbstractEventLoop, _LoopRunner] = {}

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
        with cls._shared_lock:
            if key not in cls._shared:
                for folder in reversed(search_paths):
                    if folder not in sys.path:
                        sys.path.insert(0, folder)
                cls._shared[key] = cls(load_config(path), Plugins())
            return cls._shared[key]

    @property
    def trainable_targets(self) -> tuple[str, ...]:
        """The agents whose calls train (empty: every agent), as this worker's runners have them."""
        if self.parts is None:
            raise RuntimeError(
                "trainable_targets is known once the first episode has built the rollout parts"
            )
        return self.parts.agents.trainable

    async def run(
        self, task: Task, engine: Any, sampling: SamplingParams, *, group_id: str = "", repeat: int = 0
    ) -> tuple[Trajectory, list[Sample]]:
        """Run the workflow once on `task` through `engine`; the trajectory and its merged samples."""
        # Shielded: an episode cancelled while the gateway starts must not cancel it for the others.
        runner = await asyncio.shield(self._loop_runner(engine).ready)
        trajectory = await runner.run_one(task, group_id or task.task_id, repeat, sampling, engine=engine)
        samples, _ = merge_trajectory(trajectory, trainable_targets=runner.trainable_targets or None)
        self.progress.add(trajectory)
        if self.progress.done == IDLE_AFTER:
            runner.warn_idle_targets(self.progress.called, self.progress.done)
        return trajectory, samples

    def _loop_runner(self, engine: Any) -> _LoopRunner:
        """The running loop's runner, started on its first episode; the parts, on the process's first."""
        loop = asyncio.get_running_loop()
        with self._lock:
            parts = self.parts
            if parts is None:
                # The engine adapters of one worker are all of one kind: the first one's tokenizer is theirs.
                parts = RolloutParts.build(self.config, self.plugins)
                self.tokenizer = engine_tokenizer(self.config, engine)
                self.auxiliary = build_auxiliary_models(
                    self.config.auxiliary_models,
                    self.config.context_tracker,
                    partial(build_auxiliary_engine, self.config, self.plugins),
                )
                self.parts = parts
            for ended in [known for known in self._loops if known.is_closed()]:
                del self._loops[ended]
            current = self._loops.get(loop)
            if current is None or current.failed:
                current = self._loops[loop] = _LoopRunner(
                    loop,
                    lambda gateway: parts.runner(
                        engine=None,
                        tokenizer=self.tokenizer,
                        gateway=gateway,
                        auxiliary=self.auxiliary,
                        max_parallel=1,
                    ),
                )
            return current


class _LoopRunner:
    """One event loop's runner: a task holds its gateway open until the loop shuts down and cancels it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, make: Callable[[Gateway], RolloutRunner]) -> None:
        self.ready: asyncio.Future[RolloutRunner] = loop.create_future()
        self._make = make
        # asyncio keeps only a weak reference to a task: this one is held here.
        self._task = loop.create_task(self._serve())

    @property
    def failed(self) -> bool:
        """The gateway did not start: the next episode on this loop tries again."""
        return self.ready.done() and (self.ready.cancelled() or self.ready.exception() is not None)

    async def _serve(self) -> None:
        try:
            async with Gateway() as gateway:
                self.ready.set_result(self._make(gateway))
                await asyncio.get_running_loop().create_future()
        except Exception as exc:
            # The episodes waiting on `ready` get the error; this task ends quietly.
            if not self.ready.done():
                self.ready.set_exception(exc)


class WorkerProgress:
    """Rollouts done in this worker process, generated tokens per second, mean reward; logged at most
    every `PROGRESS_EVERY_S` seconds."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.logged = 0.0
        self.done = 0
        self.tokens = 0
        self.reward = 0.0
        self.called: Counter[str] = Counter()  # generated model calls per agent

    def add(self, trajectory: Trajectory) -> None:
        now = time.perf_counter()
        if self.started is None:
            self.started = now - (trajectory.timings.get("total_s", 0.0) if trajectory.timings else 0.0)
        self.done += 1
        self.tokens += sum(len(call.response_ids) for call in trajectory.calls)
        self.called.update(generated_calls([trajectory]))
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


def reward_of(trajectory: Trajectory, agent: str | None = None) -> float:
    """One number for the whole run: the reward, per-step rewards summed, 0 when unjudged; with
    `agent`, that agent's own reward when the judge scored agents one by one."""
    if agent is not None and agent in trajectory.agent_rewards:
        return trajectory.agent_rewards[agent]
    reward = trajectory.reward
    if isinstance(reward, list):
        return float(sum(reward))
    return float(reward) if reward is not None else 0.0
