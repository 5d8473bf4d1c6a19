"""The rollout runner: many workflow runs at once, each recorded, judged and checked.

`num_repeat` runs of one task form a group (advantages are computed within
it). At most `max_env_worker` runs are in flight, counted over every
`run()` of the runner at once (one FIFO semaphore: batches run side by side,
as asynchronous rollouts and validation do, share the bound, and the runs
queued first start first). A run that raises or
exceeds `rollout_timeout` is recorded with its traceback and excluded from
training; it never stops the others.

Executors: given a `WorkflowExecutor` (what `rollout.executor` names, e.g.
`ray` of astuner-executor-ray), the workflow call of each run goes to it,
inside its `session()` for each `run()`; its remote model handles call back
through the gateway, and engine, tracker, judge and checks stay here.
Without one (`local`), workflows run in this event loop.

Auxiliary models (`astuner.rollout.auxiliary`): every run gets its own
untrainable handle on each, in `model_tuner.auxiliary_models` and
`workflow_task.auxiliary_models`; they stay open through judging, and their
calls end up in `trajectory.auxiliary_calls`.

Environments: with a `gym_env_factory`, every run gets its own environment.
The factory is called as `factory(task)` (it may return an awaitable) in
the same asyncio task that then runs the workflow, and counts against
`rollout_timeout`; the result is `workflow_task.gym_env` and
`model_tuner.gym_env`. A factory that fails cleans up what it made itself.
Once made, the environment is released after judging on every path
(success, exception, timeout, cancellation) through its `aclose()`
(awaited) or `close()`. A judge that needs the live environment defines
`async judge_rollout(workflow_task, output)`, which the runner calls
instead of `judge(task, output)`.

Blocking workflows: a workflow that blocks the event loop (`time.sleep` in
async code) would stall the timeout and Ctrl-C with it. The loop watchdog
(`astuner.rollout.watchdog`) interrupts it where it blocks once its
rollout is past `rollout_timeout`; under the `astuner` command, `run()`
also keeps SIGINT/SIGTERM working meanwhile (a second one exits at once).
A workflow that ignores its timeout, catching the cancellation or the
watchdog's interrupt and going on, is abandoned (`astuner.rollout.deadline`):
recorded as timed out, and never waited for.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
import traceback
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from astuner.core.madness import MadnessCheck, MadnessMonitor, apply_madness_reward
from astuner.core.targets import TARGETS_KEY, generated_calls, idle_targets_warning
from astuner.core.task import JudgeOutput, Task, WorkflowOutput, WorkflowTask
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.tracker import ContextTracker, TrackerSettings
from astuner.core.trajectory import Trajectory
from astuner.logs import get_logger, warn_once
from astuner.protocols import (
    Closes,
    ClosesAsync,
    Judge,
    JudgesWholeRollouts,
    NamesItsOrigin,
    ServesAdapters,
    WorkflowExecutor,
)
from astuner.record import append_trajectories
from astuner.rollout.agents import AgentPlan
from astuner.rollout.agentscope_model import model_tuner_class
from astuner.rollout.deadline import RolloutTimeout, run_within_deadline
from astuner.rollout.engine import SamplingParams
from astuner.rollout.gateway import Gateway
from astuner.rollout.model_tuner import ModelTuner
from astuner.rollout.progress import RolloutProgress
from astuner.rollout.watchdog import LoopBlocked, watch_run

if TYPE_CHECKING:
    from astuner.rollout.auxiliary import AuxiliaryModel
from astuner.rollout.workflow import LoadedWorkflow


@dataclass
class RunnerSettings:
    """The runner's knobs, as plain values; `disable_toolcalls` shows a model no tools and reads no
    tool calls from its replies (`rollout.disable_toolcalls`)."""

    max_env_worker: int = 32
    rollout_timeout: float = 1800.0
    agent_madness_reward: float = -1.0
    agent_madness_termination: bool = True
    tracker: TrackerSettings = field(default_factory=TrackerSettings)
    disable_toolcalls: bool = False


class RolloutRunner:
    """Runs a workflow over tasks through one engine and returns the trajectories.

    `agents` is the run's `AgentPlan` (default: the workflow's trainable targets, no adapters).
    `workflow_config` is what the workflow reads as `workflow_task.config` (the run's config, under
    `astuner run`); the runner only hands it on.
    `tool_notice` is called with the tokenizer at each model call that offers tools (see
    `astuner.rollout.stack.ToolFormatNotice`).
    """

    def __init__(
        self,
        *,
        workflow: LoadedWorkflow,
        judge: Judge,
        engine: Any,
        tokenizer: ChatTokenizer | None,
        settings: RunnerSettings | None = None,
        madness_checks: Mapping[str, MadnessCheck] | None = None,
        gateway: Gateway | None = None,
        auxiliary_models: Mapping[str, AuxiliaryModel] | None = None,
        agents: AgentPlan | None = None,
        workflow_config: object = None,
        gym_env_factory: Callable[[Task], Any] | None = None,
        executor: WorkflowExecutor | None = None,
        tool_notice: Callable[[ChatTokenizer], None] | None = None,
    ) -> None:
        self.workflow = workflow
        self.judge = judge
        self.engine = engine
        self.tokenizer = tokenizer
        self.settings = settings or RunnerSettings()
        self.madness_checks = dict(madness_checks or {})
        self.gateway = gateway
        self.auxiliary_models = dict(auxiliary_models or {})
        self.workflow_config = workflow_config
        self.gym_env_factory = gym_env_factory
        self.executor = executor
        self.tool_notice = tool_notice
        self.agents = AgentPlan(tuple(workflow.trainable_targets)) if agents is None else agents
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._holding_session = False
        _warn_of_unserved_adapters(self.agents, engine)

    @property
    def trainable_targets(self) -> list[str]:
        """The agents whose calls train (`rollout.trainable_targets`, else the workflow's); empty: all."""
        return list(self.agents.trainable)

    async def run(
        self,
        tasks: Sequence[Task],
        sampling: SamplingParams,
        num_repeat: int = 1,
        *,
        tag: str = "rollout",
        progress: bool = True,
        record: Path | None = None,
    ) -> list[Trajectory]:
        """Run every task `num_repeat` times; trajectories come back grouped, in task order.

        `record`: the rollout file each trajectory is appended to (and flushed) as soon as its run
        is judged, so the file shows a long batch as it goes; its lines are in the order the runs
        ended, and readers group them by `group_id`. A failed write (a full disk) cancels the
        batch's other runs and raises.
        """
        limit = self._shared_limit()
        total = len(tasks) * num_repeat
        tracker = RolloutProgress(total, tag, enabled=progress)
        async with self._executor_session():
            with tracker, watch_run():
                jobs = [
                    asyncio.ensure_future(
                        self._run_one(task, f"{tag}-{i}", repeat, sampling, limit, tracker, record)
                    )
                    for i, task in enumerate(tasks)
                    for repeat in range(num_repeat)
                ]
                trajectories = await _all_or_none(jobs)
        self.warn_idle_targets(generated_calls(trajectories), len(trajectories))
        return trajectories

    def _shared_limit(self) -> asyncio.Semaphore:
        """The `max_env_worker` slots all `run()`s of this runner share on the running event loop.

        One semaphore for the runner, not one per `run()`: concurrent runs (the batches of asynchronous
        rollouts, a validation meanwhile) would otherwise each run `max_env_worker` rollouts. Its waiters
        are served in order, so the runs of the batch queued first go first. A new event loop (a runner
        used across `asyncio.run` calls) gets a new one: a semaphore belongs to one loop.
        """
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.settings.max_env_worker))
        return self._slots[1]

    def warn_idle_targets(self, called: Counter[str], rollouts: int) -> None:
        """Warn (once a process) about trainable targets that made none of the `called` calls."""
        warning = idle_targets_warning(called, rollouts, self.trainable_targets, self._targets_key())
        if warning is not None:
            idle = sorted(set(self.trainable_targets) - set(called))
            warn_once(f"idle trainable targets: {idle}", warning)

    def _targets_key(self) -> str:
        """Where the trainable targets come from, as a user would set them."""
        if self.agents.targets_configured:
            return "rollout.trainable_targets"
        return "the workflow's trainable_targets"

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """The executor's session held for every `run()` inside the block (nothing without an executor).

        Each `run()` otherwise opens a session of its own. Runs that overlap (the batches of
        asynchronous rollouts, a validation meanwhile) need one between them: a session may change
        the runner itself (executor `ray` with `ASTUNER_GATEWAY_HOST` swaps `gateway` for a public one
        and puts the old one back at its end), and overlapping ones would put back each other's.
        """
        if self.executor is None or self._holding_session:
            yield
            return
        async with self.executor.session(self):
            self._holding_session = True
            try:
                yield
            finally:
                self._holding_session = False

    @asynccontextmanager
    async def _executor_session(self) -> AsyncIterator[None]:
        """The remote executor's cluster (and worker-facing gateway) for one `run()`, unless `session()`
        holds one."""
        if self.executor is None or self._holding_session:
            yield
            return
        async with self.executor.session(self):
            yield

    async def _run_one(
        self,
        task: Task,
        group_id: str,
        repeat: int,
        sampling: SamplingParams,
        limit: asyncio.Semaphore,
        progress: RolloutProgress,
        record: Path | None,
    ) -> Trajectory:
        async with limit:
            trajectory = await self.run_one(task, group_id, repeat, sampling)
        if record is not None:
            append_trajectories(record, [trajectory])
        progress.advance(trajectory)
        return trajectory

    def make_tuner(
        self, rollout_id: str, sampling: SamplingParams, gym_env: Any = None, engine: Any = None
    ) -> ModelTuner:
        """A fresh model handle for one run (an AgentScope chat model if the workflow uses AgentScope).

        `engine`: this run's own engine instead of the runner's (a verl or Trinity worker's call).
        """
        tracker = None
        if self.tokenizer is not None:
            monitor = MadnessMonitor(self.madness_checks, terminate=self.settings.agent_madness_termination)
            notice = partial(self.tool_notice, self.tokenizer) if self.tool_notice is not None else None
            tracker = ContextTracker(self.tokenizer, self.settings.tracker, madness=monitor, on_tools=notice)
        gateway_url = self.gateway.url if self.gateway is not None else None
        return model_tuner_class()(
            rollout_id=rollout_id,
            engine=self.engine if engine is None else engine,
            sampling=sampling,
            tracker=tracker,
            gateway_url=gateway_url,
            gym_env=gym_env,
            auxiliary_models={
                name: model.handle(rollout_id, gateway_url) for name, model in self.auxiliary_models.items()
            },
            trainable_targets=self.trainable_targets,
            adapters=self.agents.adapters & _served_adapters(self.engine if engine is None else engine),
            workflow_config=self.workflow_config,
            disable_toolcalls=self.settings.disable_toolcalls,
        )

    async def run_one(
        self, task: Task, group_id: str, repeat: int, sampling: SamplingParams, engine: Any = None
    ) -> Trajectory:
        """One workflow run: execute, judge, check; errors are recorded, never raised.

        `engine`: as in `make_tuner`.
        """
        rollout_id = f"{group_id}-{repeat}-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        tuner = self.make_tuner(rollout_id, sampling, engine=engine)
        auxiliary = tuner.auxiliary_models
        if self.gateway is not None:
            for handle in (tuner, *auxiliary.values()):
                self.gateway.register(handle)
        workflow_task = WorkflowTask(
            task=task,
            group_id=group_id,
            rollout_id=rollout_id,
            repeat_index=repeat,
            auxiliary_models=auxiliary,
            config=self.workflow_config,
            model_tuner=tuner,
        )
        error: str | None = None
        output = None
        try:
            try:
                output = await run_within_deadline(
                    self._episode(workflow_task, tuner), rollout_id, self.settings.rollout_timeout
                )
            except RolloutTimeout as exc:
                error = str(exc)
            except LoopBlocked as exc:
                error = f"{exc}\nWhere it blocked:\n{traceback.format_exc()}"
            except Exception:
                error = traceback.format_exc()
            finally:
                await tuner.aclose()
                if self.gateway is not None:
                    self.gateway.unregister(rollout_id)
            workflow_s = time.perf_counter() - started
            trajectory = tuner.trajectory(task_id=task.task_id, group_id=group_id)
            trajectory.metadata["task"] = task.model_dump(mode="json")
            if self.trainable_targets:
                trajectory.metadata[TARGETS_KEY] = self.trainable_targets
            if tuner.step_rewards:
                trajectory.metadata["step_rewards"] = list(tuner.step_rewards)
                trajectory.metadata["env_steps"] = [dict(step) for step in tuner.env_steps]
            if output is not None and error is None:
                output = output.with_judge_input(tuner.judge_input)
                trajectory.metadata["workflow_output"] = output.model_dump(mode="json")
                try:
                    verdict = await self._judge(workflow_task, output)
                except Exception:
                    error = "The judge raised:\n" + traceback.format_exc()
                else:
                    error = self._non_finite(verdict.reward, task)
                if error is None and isinstance(verdict.reward, dict):
                    error = self._unrewarded_agents(verdict.reward, trajectory)
                if error is None:
                    _set_reward(trajectory, verdict)
                    trajectory.metrics.update(output.metrics)
                    trajectory.metrics.update(verdict.metrics)
                    if trajectory.madness:
                        trajectory = apply_madness_reward(trajectory, self.settings.agent_madness_reward)
        finally:
            await _release(workflow_task.gym_env, rollout_id)
            # The judge may call the auxiliary models too: they stay open until it is done.
            for handle in auxiliary.values():
                await handle.aclose()
                if self.gateway is not None:
                    self.gateway.unregister(handle.rollout_id)
        trajectory.auxiliary_calls = [call for handle in auxiliary.values() for call in handle.calls]
        trajectory.error = error
        trajectory.timings = {"workflow_s": workflow_s, "total_s": time.perf_counter() - started}
        return trajectory

    async def _episode(self, workflow_task: WorkflowTask, tuner: ModelTuner) -> WorkflowOutput:
        """Make the run's environment (if any), then run the workflow, in one asyncio task."""
        if self.gym_env_factory is not None:
            gym_env = self.gym_env_factory(workflow_task.task)
            if inspect.isawaitable(gym_env):
                gym_env = await gym_env
            workflow_task.gym_env = tuner.gym_env = gym_env
        if self.executor is not None:
            return await self.executor.run_workflow(self, workflow_task, tuner)
        return await self.workflow.run(workflow_task, tuner)

    def _unrewarded_agents(self, rewards: Mapping[str, float], trajectory: Trajectory) -> str | None:
        """The error of per-agent rewards that leave out an agent whose calls would train."""
        trained = {c.agent_name for c in trajectory.calls if c.trainable and c.response_ids}
        missing = sorted(trained - set(rewards))
        if not missing:
            return None
        judge = _judge_name(self.judge)
        return (
            f"The judge {judge} gave rewards for agents {sorted(rewards)} but not for {missing}, whose "
            f"calls train; the rollout is left out of training. Give every trainable agent a reward, "
            "or leave those agents out of rollout.trainable_targets."
        )

    def _non_finite(self, reward: float | list[float] | dict[str, float], task: Task) -> str | None:
        """The error of a NaN or infinite reward: it must never reach the advantages (or the weights)."""
        values = list(reward.values()) if isinstance(reward, dict) else reward
        values = values if isinstance(values, list) else [values]
        if all(math.isfinite(v) for v in values):
            return None
        judge = _judge_name(self.judge)
        error = (
            f"The judge {judge} returned a non-finite reward ({reward!r}) for task '{task.task_id}'; "
            "the rollout is left out of training. Make the judge return finite numbers."
        )
        get_logger().warning("non-finite reward", judge=str(judge), task=task.task_id, reward=repr(reward))
        return error

    async def _judge(self, workflow_task: WorkflowTask, output: WorkflowOutput) -> JudgeOutput:
        if isinstance(self.judge, JudgesWholeRollouts):
            return await self.judge.judge_rollout(workflow_task, output)
        return await self.judge.judge(workflow_task.task, output)


async def _all_or_none(jobs: list[asyncio.Future[Trajectory]]) -> list[Trajectory]:
    """The jobs' results in their order; when one raises, the others are cancelled (and awaited)
    before its error is raised, so no run goes on writing after its batch has failed."""
    try:
        return list(await asyncio.gather(*jobs))
    except BaseException:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise


async def _release(gym_env: Any, rollout_id: str) -> None:
    """Release a run's environment; a failure is logged, since the run's own outcome is what matters."""
    if gym_env is None:
        return
    try:
        if isinstance(gym_env, ClosesAsync):
            await gym_env.aclose()
        elif isinstance(gym_env, Closes):
            gym_env.close()
    except Exception as exc:
        get_logger().warning(
            "environment release failed", rollout=rollout_id, error=f"{type(exc).__name__}: {exc}"
        )


def _judge_name(judge: Judge) -> str:
    """How the runner's messages name a judge: where it came from, else its class."""
    return (judge.where if isinstance(judge, NamesItsOrigin) else None) or type(judge).__name__


def _set_reward(trajectory: Trajectory, verdict: JudgeOutput) -> None:
    """The verdict onto the trajectory: per-agent rewards are kept by agent, `reward` is their mean."""
    if isinstance(verdict.reward, dict):
        trajectory.agent_rewards = dict(verdict.reward)
        trajectory.reward = sum(verdict.reward.values()) / len(verdict.reward)
    else:
        trajectory.reward = verdict.reward
    trajectory.is_success = verdict.is_success


def _warn_of_unserved_adapters(plan: AgentPlan, engine: Any) -> None:
    """A warning when `engine` lacks adapters of the plan that have a folder: those agents generate
    with its own weights. A new adapter (`agents.<name>.lora` without `path`) starts as the identity,
    so an engine without it (`astuner eval` or backbone debug on a training config) runs that agent
    as the adapter would: no warning."""
    saved = set(plan.fixed_adapters) | {name for name, lora in plan.trained_adapters.items() if lora.path}
    unserved = saved - _served_adapters(engine)
    if unserved and engine is not None:
        get_logger().warning(
            "agents without their adapters",
            agents=sorted(unserved),
            keys=[f"agents.{name}.lora.path" for name in sorted(unserved)],
            why=f"engine {type(engine).__name__} does not load their LoRA adapters: they generate with "
            "its own weights. Adapters are served by backbone torch, and outside training by engine "
            "transformers (rollout.engine: transformers, no rollout.engine_url)",
        )


def _served_adapters(engine: Any) -> frozenset[str]:
    return engine.adapter_names if isinstance(engine, ServesAdapters) else frozenset()
