"""The model handle's environment concern: the task's gym environment and the rewards of its steps.

A task read from an environment service comes with an environment of its
own (`workflow_task.gym_env`, made by the reader's `gym_env_factory`). The
workflow acts on it through the model handle, which keeps every step's
reward with the index of the model call that chose the action; the runner
writes them into the trajectory's `step_rewards` and `env_steps`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from astuner.errors import AstunerError
from astuner.protocols import StepsAsync

StepResult = tuple[Any, float, bool, dict[str, Any]]


class RolloutEnvironment:
    """One rollout's environment (None until the runner makes it) and the steps taken on it.

    `last_call()` gives the index of the rollout's latest model call: the
    call whose reply chose the action of the step being recorded.
    """

    def __init__(self, gym_env: Any, last_call: Callable[[], int]) -> None:
        self.gym_env = gym_env
        self.step_rewards: list[float] = []
        self.env_steps: list[dict[str, Any]] = []
        self._last_call = last_call

    def step(self, action: Any) -> StepResult:
        """Send an action: `(observation, reward, terminated, info)`."""
        obs, reward, terminated, info = self._env().step(action)
        return self._record(obs, reward, terminated, info)

    async def astep(self, action: Any) -> StepResult:
        """`step`, awaited: an environment that `StepsAsync` is awaited, any other is stepped directly."""
        env = self._env()
        result = await env.astep(action) if isinstance(env, StepsAsync) else env.step(action)
        return self._record(*result)

    def _env(self) -> Any:
        if self.gym_env is None:
            raise AstunerError(
                "gym_step() needs an environment: this task was not read from an environment "
                "service (task_reader.type: env_service)."
            )
        return self.gym_env

    def _record(self, obs: Any, reward: float, terminated: bool, info: dict[str, Any]) -> StepResult:
        """Keep the step's reward with the index of the model call that chose the action."""
        self.step_rewards.append(float(reward))
        self.env_steps.append(
            {"call_index": self._last_call(), "reward": float(reward), "terminated": bool(terminated)}
        )
        return obs, reward, terminated, info
