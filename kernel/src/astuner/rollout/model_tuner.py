"""`ModelTuner`: the trainable model handle a workflow receives, bound to one rollout.

Every way an agent can talk to the model ends in `ModelTuner.chat()`:
AgentScope agents call it as a chat model (`astuner.rollout.agentscope_model`
for 1.x, `astuner.rollout.agentscope2_model` for 2.x),
OpenAI-SDK agents through the gateway at `openai_base_url`, and workflow
code may call it directly. `chat()` asks the context tracker for the exact
prompt ids, has the engine generate, records the call, and returns it.
"""

from __future__ import annotations

import copy
import functools
import ssl
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx

from astuner import compat
from astuner.core.chat import normalize_messages
from astuner.core.trajectory import LLMCall, ToolCall, Trajectory
from astuner.errors import AstunerError
from astuner.rollout.engine import ChatEngine, Generation, SamplingParams

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
        config: Any = None,
        disable_toolcalls: bool = False,
    ) -> None:
        if tracker is None and not isinstance(engine, ChatEngine):
            raise ValueError("a token engine needs a context tracker")
        self.rollout_id = rollout_id
        self.engine = engine
        self.sampling = sampling
        self.tracker = tracker
        self.gateway_url = gateway_url
        self.gym_env = gym_env
        self.auxiliary_models: dict[str, Any] = dict(auxiliary_models or {})
        self.trainable_targets = list(trainable_targets or [])
        self.adapters = frozenset(adapters)
        self.agent_name = agent_name
        self.trainable = trainable
        self.config = config
        self.disable_toolcalls = disable_toolcalls
        self.judge_input: dict[str, Any] = {}
        self.step_rewards: list[float] = []
        self.env_steps: list[dict[str, Any]] = []
        self._text_calls: list[LLMCall] = []
        self._http_clients: list[httpx.AsyncClient] = []

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
            return await self._text_only_call(messages, tools, name, params)

        async def generate(prompt_ids: list[int], max_new_tokens: int) -> Generation:
            budget = replace(params, max_tokens=min(params.max_tokens, max_new_tokens))
            # A Generation, or the `(ids, logprobs, finish_reason)` of an engine written before versions.
            generation = Generation(*await self.engine.generate(prompt_ids, budget))
            return generation if generation.sampling is not None else generation._replace(sampling=budget)

        call = await self.tracker.call(messages, tools, name, generate)
        if self.disable_toolcalls and (call.tool_calls or call.tool_call_errors):
            call.content, call.tool_calls, call.tool_call_errors = call.text, [], []
            call.tool_parse_error = None
        if not self.trainable or (self.trainable_targets and name not in self.trainable_targets):
            call.trainable = False
        return call

    async def _text_only_call(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        name: str,
        params: SamplingParams,
    ) -> LLMCall:
        normalized = normalize_messages(messages)
        reply = await self.engine.chat(normalized, tools, params)
        call = LLMCall(
            index=len(self._text_calls),
            agent_name=name,
            messages=normalized,
            tools=[dict(t) for t in tools] if tools else None,
            finish_reason=reply.finish_reason,
            text=reply.content,
            content=reply.content,
            tool_calls=[
                ToolCall(
                    id=tc.get("id") or f"call_{i}",
                    name=tc["function"]["name"],
                    arguments=tc["function"].get("arguments") or "{}",
                )
                for i, tc in enumerate(reply.tool_calls)
            ],
            sampling=params.record(),
            trainable=False,
        )
        self._text_calls.append(call)
        return call

    @property
    def calls(self) -> list[LLMCall]:
        """Every call of this rollout so far, in order."""
        return self.tracker.calls if self.tracker is not None else self._text_calls

    @property
    def context_overflow(self) -> bool:
        """True once a prompt plus the response budget no longer fits `max_model_len`."""
        return self.tracker is not None and self.tracker.context_overflow

    def for_agent(self, agent_name: str) -> ModelTuner:
        """This handle under another agent name; calls share the rollout's record."""
        view = copy.copy(self)
        view.agent_name = agent_name
        return view

    def trajectory(self, **fields: Any) -> Trajectory:
        """The rollout's record so far."""
        if self.tracker is not None:
            return self.tracker.trajectory(self.rollout_id, **fields)
        return Trajectory(trajectory_id=self.rollout_id, calls=list(self._text_calls), **fields)

    # ------------------------------------------------------------ judge input

    def update_judge_input_dictionary(self, **values: Any) -> None:
        """Hand values to the judge (the first tutorials' way): they join `WorkflowOutput.metadata`.

        `final_answer=...` is what the math judges read; `raw_reward=` with
        `is_success=` together are taken as the verdict itself.
        """
        compat.emit_notices([compat.JUDGE_INPUT_NOTICE])
        self.judge_input.update(values)

    def get_judge_input_dictionary(self) -> dict[str, Any]:
        """What `update_judge_input_dictionary` has collected so far."""
        return dict(self.judge_input)

    # ----------------------------------------------------------- environment

    def gym_step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
        """Send an action to the task's environment: `(observation, reward, terminated, info)`.

        Synchronous, as the seeds write it. With the `env_service` reader the
        environment suspends only this rollout while it waits (see
        astuner-judge-envservice); `await agym_step(action)` is the async form.
        """
        obs, reward, terminated, info = self._gym_env().step(action)
        return self._record_step(obs, reward, terminated, info)

    def env_step_fn(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
        """`gym_step` under the first tutorials' name."""
        return self.gym_step(action)

    async def agym_step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
        """`gym_step`, awaited: uses the environment's `astep` when it has one."""
        env = self._gym_env()
        astep = getattr(env, "astep", None)
        result = await astep(action) if callable(astep) else env.step(action)
        return self._record_step(*result)

    def _gym_env(self) -> Any:
        if self.gym_env is None:
            raise AstunerError(
                "gym_step() needs an environment: this task was not read from an environment "
                "service (task_reader.type: env_service)."
            )
        return self.gym_env

    def _record_step(
        self, obs: Any, reward: float, terminated: bool, info: dict[str, Any]
    ) -> tuple[Any, float, bool, dict[str, Any]]:
        """Keep the step's reward with the index of the model call that chose the action."""
        self.step_rewards.append(float(reward))
        self.env_steps.append(
            {"call_index": len(self.calls) - 1, "reward": float(reward), "terminated": bool(terminated)}
        )
        return obs, reward, terminated, info

    # ---------------------------------------------------------------- OpenAI

    @property
    def openai_base_url(self) -> str:
        """An OpenAI-compatible base URL routed into this rollout's record."""
        if self.gateway_url is None:
            raise AstunerError("This model handle has no gateway; the runner starts one per run.")
        return f"{self.gateway_url}/rollout/{self.rollout_id}/{self.agent_name}/v1"

    def openai_client(self, **kwargs: Any) -> Any:
        """An `openai.AsyncOpenAI` client bound to this rollout (needs `astuner[openai]`)."""
        try:
            from openai import AsyncOpenAI
        except ImportError as exc:
            raise AstunerError(
                "openai_client() needs the openai package: pip install 'astuner[openai]'."
            ) from exc
        if "http_client" not in kwargs:
            kwargs["http_client"] = httpx.AsyncClient(verify=_loopback_ssl_context(), timeout=None)
            self._http_clients.append(kwargs["http_client"])
        return AsyncOpenAI(base_url=self.openai_base_url, api_key="astuner", **kwargs)

    async def aclose(self) -> None:
        """Close the HTTP clients `openai_client()` made (the runner calls this after the rollout)."""
        while self._http_clients:
            await self._http_clients.pop().aclose()


@functools.cache
def _loopback_ssl_context() -> ssl.SSLContext:
    # The gateway is plain HTTP on loopback; building a default SSL context per
    # client (loading the CA bundle) costs ~30 ms, so every client shares one.
    return ssl.create_default_context()
