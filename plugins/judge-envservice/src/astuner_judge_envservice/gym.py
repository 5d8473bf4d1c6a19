"""`EnvServiceGym`: one EnvService instance as the gym env a workflow drives.

A workflow finds it at `workflow_task.gym_env`:

- `initial_messages`: the `state` of `/create` (system prompt, then the
  task), the agent's first prompt;
- `step(action) -> (observation, reward, terminated, info)`, also reached as
  `model_tuner.gym_step(action)`; the observation is the text of the
  returned state, the full state is `info["state"]`;
- `reset()`: a fresh instance of the same task (the protocol has no reset);
- `evaluate(sparse=False)`, `get_info()`, `close()`;
- `astep`, `areset`, `aevaluate`, `aget_info`, `aclose`: the same, awaitable.

The HTTP runs on the factory's loop thread (see `astuner_judge_envservice.loop`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
import time
from typing import Any

from astuner_judge_envservice.client import EnvServiceClient
from astuner_judge_envservice.loop import LoopThread


def new_instance_id() -> str:
    """An instance id in the reference services' form, `exp_<unix time>_<8 hex>`."""
    return f"exp_{int(time.time())}_{secrets.token_hex(4)}"


class EnvServiceGym:
    """An environment instance for one rollout; created by `EnvServiceGymFactory`."""

    def __init__(
        self,
        client: EnvServiceClient,
        io: LoopThread,
        task_id: str,
        *,
        create_params: dict[str, Any] | None = None,
        step_params: dict[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.io = io
        self.task_id = task_id
        self.create_params = dict(create_params or {})
        self.step_params = dict(step_params or {})
        self.instance_id: str | None = None
        self.initial_messages: list[dict[str, Any]] = []
        self.create_info: dict[str, Any] = {}
        self.steps = 0
        self.terminated = False
        self._creating: concurrent.futures.Future[Any] | None = None

    # ----------------------------------------------------------------- async

    async def astart(self) -> list[dict[str, Any]]:
        """Create the instance; returns (and keeps) the initial messages.

        The instance id is chosen here, before the request, so the instance
        can be released even when the answer to `/create` never arrives; a
        cancelled caller leaves the request to finish, and `aclose()` waits
        for it, so a release can never overtake the creation it undoes.
        """
        self.instance_id = new_instance_id()
        self.steps, self.terminated = 0, False
        self._creating = self.io.submit(
            self.client.create(self.task_id, self.instance_id, self.create_params)
        )
        data = await asyncio.shield(asyncio.wrap_future(self._creating))
        self.initial_messages = list(data.get("state") or [])
        self.create_info = dict(data.get("info") or {})
        return self.initial_messages

    async def areset(self) -> list[dict[str, Any]]:
        """Release the instance and start a new one of the same task."""
        await self.aclose()
        return await self.astart()

    async def astep(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        data = await self.io.run(self.client.step(self._live_id("step"), action, self.step_params))
        self.steps += 1
        state = data.get("state") or []
        if isinstance(state, dict):
            state = [state]
        self.terminated = bool(data.get("is_terminated", False))
        info = {**dict(data.get("info") or {}), "state": state}
        return _observation(state), float(data.get("reward") or 0.0), self.terminated, info

    async def aevaluate(self, sparse: bool = False, params: dict[str, Any] | None = None) -> float:
        return await self.io.run(self.client.evaluate(self._live_id("evaluate"), sparse, params))

    async def aget_info(self) -> Any:
        return await self.io.run(self.client.get_info(self._live_id("get_info")))

    async def aclose(self) -> None:
        """Release the instance; the release finishes even if the caller is cancelled meanwhile."""
        release = self.abandon()
        if release is not None:
            await asyncio.shield(asyncio.wrap_future(release))

    def abandon(self) -> concurrent.futures.Future[bool] | None:
        """Start releasing the instance without waiting: safe where an await could be interrupted.

        The release runs on the loop thread, after any pending `/create`;
        the factory's `aclose()` waits for it.
        """
        instance_id, creating = self.instance_id, self._creating
        self.instance_id = self._creating = None
        if instance_id is None:
            return None
        return self.io.submit_to_end(self._release(instance_id, creating))

    async def _release(self, instance_id: str, creating: concurrent.futures.Future[Any] | None) -> bool:
        """Runs on the loop thread: wait out a pending `/create`, then `/release`."""
        if creating is not None and not creating.done():
            await asyncio.wait([asyncio.wrap_future(creating)])
        return await self.client.release(instance_id)

    # ------------------------------------------------------------------ sync

    def reset(self) -> list[dict[str, Any]]:
        return self.io.call_sync(self.areset())

    def step(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        return self.io.call_sync(self.astep(action))

    def evaluate(self, sparse: bool = False, params: dict[str, Any] | None = None) -> float:
        return self.io.call_sync(self.aevaluate(sparse, params))

    def get_info(self) -> Any:
        return self.io.call_sync(self.aget_info())

    def close(self) -> None:
        self.io.call_sync(self.aclose())

    def _live_id(self, what: str) -> str:
        if self.instance_id is None:
            raise RuntimeError(
                f"{what}() on an environment of task '{self.task_id}' that is not started or closed"
            )
        return self.instance_id


def _observation(state: list[Any]) -> str:
    """The text the agent reads: the contents of the state messages, one per line."""
    texts = []
    for message in state:
        content = message.get("content") if isinstance(message, dict) else message
        texts.append(content if isinstance(content, str) else str(content))
    return "\n".join(texts)
