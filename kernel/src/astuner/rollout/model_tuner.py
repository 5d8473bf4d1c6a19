"""`ModelTuner`: the trainable model handle a workflow receives, bound to one rollout.

Every way an agent can talk to the model ends in `ModelTuner.chat()`:
AgentScope agents call it as a chat model (`astuner.rollout.agentscope_model`
for 1.x, `astuner.rollout.agentscope2_model` for 2.x),
OpenAI-SDK agents through the gateway at `openai_base_url`, and workflow
code may call it directly. `chat()` asks the context tracker for the exact
prompt ids, has the engine generate, records the call, and returns it.

The handle composes one part per concern, each in its own module: making
and recording calls (`astuner.rollout.chat`), the task's environment
(`astuner.rollout.environment`), the values handed to the judge
(`astuner.rollout.judge_input`) and the OpenAI clients
(`astuner.rollout.openai_client`). Here they meet: which agent calls, with
which sampling and adapter, and whether the call trains.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from astuner.core.trajectory import LLMCall, Trajectory
from astuner.rollout.chat import drop_tool_calls, text_only_call, tracked_call
from astuner.rollout.engine import ChatEngine, SamplingParams
from astuner.rollout.environment import RolloutEnvironment, StepResult
from astuner.rollout.judge_input import JudgeInput
from astuner.rollout.openai_client import OpenAIClients, openai_base_url

if TYPE_CHECKING:
    from astuner.core.tracker import ContextTracker


class ModelTuner:
    """The model as one rollout sees it.

    `chat(messages, tools)` is the one entry point; `openai_base_url` and
    `openai_client()` expose it over HTTP; `gym_step()` drives the task's
    environment; `for_agent(name)` gives the same handle under another
    agent name (multi-agent workflows: the calls of an agent in `adapters`
    generate with that agent's LoRA adapter); `auxiliary_models` holds named
    models that are used but never trained (each a `ModelTuner` with
    `trainable=False`: every call it records is marked untrainable).
    `config` is `workflow_config`, the run's config as the workflow reads
    it (`workflow_task.config`), kept here for the first tutorials'
    `model_tuner.config`; the handle itself never reads it.
    """

    def __init__(
        self,
        *,
        rollout_id: str,
        engine: Any,
        sampling: SamplingParams,
        tracker: ContextTracker | None = None,
        gateway_url: str | None = None,
        gym_env: Any = None,
        auxiliary_models: Mapping[str, Any] | None = None,
        trainable_targets: Sequence[str] | None = None,
        adapters: Collection[str] = (),
        agent_name: str = "default",
        trainable: bool = True,
        workflow_config: object = None,
        disable_toolcalls: bool = False,
    ) -> None:
        if tracker is None and not isinstance(engine, ChatEngine):
            raise ValueError("a token engine needs a context tracker")
        self.rollout_id = rollout_id
        self.engine = engine
        self.sampling = sampling
        self.tracker = tracker
        self.gateway_url = gateway_url
        self.auxiliary_models: dict[str, Any] = dict(auxiliary_models or {})
        self.trainable_targets = list(trainable_targets or [])
        self.adapters = frozenset(adapters)
        self.agent_name = agent_name
        self.trainable = trainable
        self.config = workflow_config
        self.disable_toolcalls = disable_toolcalls
        self._text_calls: list[LLMCall] = []
        self._environment = RolloutEnvironment(gym_env, last_call=self._last_call_index)
        self._judge_input = JudgeInput()
        self._openai = OpenAIClients()

    # ----------------------------------------------------------------- calls

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        agent_name: str | None = None,
        **sampling: Any,
    ) -> LLMCall:
        """One model call with OpenAI-style messages and tools; returns the recorded call.

        `sampling` overrides this rollout's sampling settings for this call
        (`temperature`, `top_p`, `top_k`, `max_tokens`, `seed`; None keeps
        the rollout's), checked by `SamplingParams.override`. The settings
        the engine was given are recorded as `call.sampling`, and the torch
        trainer computes the call's log-probs at its temperature.
        """
        name = agent_name or self.agent_name
        params = self.sampling.override(**sampling)
        if name in self.adapters:
            params = replace(params, adapter=name)
        if self.disable_toolcalls:
            tools = None
        if self.tracker is None:
            call = await text_only_call(self.engine, messages, tools, name, params, len(self._text_calls))
            self._text_calls.append(call)
            return call
        call = await tracked_call(self.tracker, self.engine, messages, tools, name, params)
        if self.disable_toolcalls:
            drop_tool_calls(call)
        if not self.trainable or (self.trainable_targets and name not in self.trainable_targets):
            call.trainable = False
        return call

    @property
    def calls(self) -> list[LLMCall]:
        """Every call of this rollout so far, in order."""
        return self.tracker.calls if self.tracker is not None else self._text_calls

    @property
    def context_overflow(self) -> bool:
        """True once a prompt plus the response budget no longer fits `max_model_len`."""
        return self.tracker is not None and self.tracker.context_overflow

    def _last_call_index(self) -> int:
        """The index of the latest call (-1 before the first): the call an environment step answers."""
        return len(self.calls) - 1

    def for_agent(self, agent_name: str) -> ModelTuner:
        """This handle under another agent name; calls, environment and judge input are the rollout's."""
        view = copy.copy(self)
        view.agent_name = agent_name
        return view

    def trajectory(self, **fields: Any) -> Trajectory:
        """The rollout's record so far."""
        if self.tracker is not None:
            return self.tracker.trajectory(self.rollout_id, **fields)
        return Trajectory(trajectory_id=self.rollout_id, calls=list(self._text_calls), **fields)

    # ------------------------------------------------------------ judge input

    @property
    def judge_input(self) -> dict[str, Any]:
        """The values handed to the judge so far (the runner adds them to the output's metadata)."""
        return self._judge_input.values

    def update_judge_input_dictionary(self, **values: Any) -> None:
        """Hand values to the judge (the first tutorials' way): they join `WorkflowOutput.metadata`.

        `final_answer=...` is what the math judges read; `raw_reward=` with
        `is_success=` together are taken as the verdict itself.
        """
        self._judge_input.update(**values)

    def get_judge_input_dictionary(self) -> dict[str, Any]:
        """What `update_judge_input_dictionary` has collected so far."""
        return self._judge_input.snapshot()

    # ----------------------------------------------------------- environment

    @property
    def gym_env(self) -> Any:
        """The task's environment (None if it has none); the runner sets it before the workflow runs."""
        return self._environment.gym_env

    @gym_env.setter
    def gym_env(self, gym_env: Any) -> None:
        self._environment.gym_env = gym_env

    @property
    def step_rewards(self) -> list[float]:
        """The reward of every environment step so far, in order."""
        return self._environment.step_rewards

    @property
    def env_steps(self) -> list[dict[str, Any]]:
        """Every environment step so far: `call_index` (the call choosing the action), reward, terminated."""
        return self._environment.env_steps

    def gym_step(self, action: Any) -> StepResult:
        """Send an action to the task's environment: `(observation, reward, terminated, info)`.

        Synchronous, as the seeds write it. With the `env_service` reader the
        environment suspends only this rollout while it waits (see
        astuner-judge-envservice); `await agym_step(action)` is the async form.
        """
        return self._environment.step(action)

    def env_step_fn(self, action: Any) -> StepResult:
        """`gym_step` under the first tutorials' name."""
        return self.gym_step(action)

    async def agym_step(self, action: Any) -> StepResult:
        """`gym_step`, awaited: uses the environment's `astep` when it has one (`StepsAsync`)."""
        return await self._environment.astep(action)

    # ---------------------------------------------------------------- OpenAI

    @property
    def openai_base_url(self) -> str:
        """An OpenAI-compatible base URL routed into this rollout's record."""
        return openai_base_url(self.gateway_url, self.rollout_id, self.agent_name)

    def openai_client(self, **kwargs: Any) -> Any:
        """An `openai.AsyncOpenAI` client bound to this rollout (needs `astuner[openai]`)."""
        return self._openai.client(self.openai_base_url, **kwargs)

    async def aclose(self) -> None:
        """Close the HTTP clients `openai_client()` made (the runner calls this after the rollout)."""
        await self._openai.aclose()
