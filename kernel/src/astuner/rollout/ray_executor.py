"""`rollout.executor: ray`: each rollout's workflow runs as a Ray task; the model stays with the runner.

The driver keeps everything that needs the model or the record: engine,
context tracker, judge, madness checks. Only the user's workflow moves to a
Ray worker, where it gets a `RemoteModelTuner`: its `chat()` (and an OpenAI
client at `openai_base_url`) posts to the runner's gateway at
`/rollout/<rollout_id>/<agent>/v1/chat/completions`, so every call is
tracked token for token in the driver exactly as in a local run. The worker
returns the `WorkflowOutput`; the driver judges it.

Cluster: the one `ray.init` already made in this process, else the cluster
at `RAY_ADDRESS`, else a new local one that stops with the process. The
gateway listens on 127.0.0.1, which workers on this machine reach; for
workers on other nodes set `ASTUNER_GATEWAY_HOST` to an address of this
machine that they can reach (e.g. its cluster IP): the runner then serves
a gateway there for the duration of each `run()`. Workers load the workflow
the config names (an import string, or a workflow of an installed plugin)
with the driver's search paths on `sys.path`, so those folders must exist
at the same place on every node. Per-run environments (`gym_env_factory`)
are live objects of the driver and cannot be used by a remote workflow.
Auxiliary models can: the worker's `auxiliary_models` are `RemoteModelTuner`s
on their own gateway routes (`/rollout/<rollout_id>.<name>/...`), served
and recorded by the driver's untrainable handles.

Ray is imported only when this executor is used.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import httpx

from astuner.config import AstunerConfig
from astuner.core.chat import normalize_messages
from astuner.core.task import Task, WorkflowOutput, WorkflowTask
from astuner.core.trajectory import LLMCall, ToolCall
from astuner.errors import AstunerError
from astuner.rollout.auxiliary import auxiliary_rollout_id
from astuner.rollout.engine import ChatReply, SamplingParams
from astuner.rollout.gateway import Gateway
from astuner.rollout.model_tuner import ModelTuner

if TYPE_CHECKING:
    from astuner.rollout.runner import RolloutRunner

GATEWAY_HOST_ENV = "ASTUNER_GATEWAY_HOST"


class RemoteWorkflowError(AstunerError):
    """The workflow raised inside a Ray worker; the message carries the worker's traceback."""


@dataclass
class GatewayReply(ChatReply):
    """A gateway answer: the chat reply plus the token ids the driver recorded."""

    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    reasoning: str | None = None


class GatewayClient:
    """A `ChatEngine` over one rollout's gateway route for one agent (OpenAI chat completions)."""

    def __init__(self, base_url: str, timeout: float) -> None:
        self.base_url = base_url
        self._client = httpx.AsyncClient(timeout=timeout)

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        sampling: SamplingParams,
    ) -> GatewayReply:
        body: dict[str, Any] = {
            "messages": list(messages),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if tools:
            body["tools"] = list(tools)
        reply = await self._client.post(f"{self.base_url}/chat/completions", json=body)
        if reply.status_code != 200:
            raise AstunerError(
                f"The gateway at {self.base_url} answered {reply.status_code}: {reply.text[:500]}"
            )
        data = reply.json()
        choice = data["choices"][0]
        message = choice.get("message") or {}
        return GatewayReply(
            content=message.get("content") or "",
            tool_calls=list(message.get("tool_calls") or []),
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            prompt_ids=list(data.get("prompt_token_ids") or []),
            response_ids=list(choice.get("token_ids") or []),
            reasoning=message.get("reasoning_content"),
        )

    async def aclose(self) -> None:
        await self._client.aclose()


class RemoteModelTuner(ModelTuner):
    """The model handle a workflow gets in a Ray worker: every call goes to the driver's gateway.

    `chat()` returns the call with its text, tool calls and token ids; the
    trainable record (with log-probs) is the driver's, so calls here are
    marked `trainable=False`.
    """

    def __init__(
        self,
        *,
        rollout_id: str,
        gateway_url: str,
        sampling: SamplingParams,
        timeout: float,
        trainable_targets: Sequence[str] | None = None,
        agent_name: str = "default",
        auxiliary_models: Mapping[str, ModelTuner] | None = None,
    ) -> None:
        self._route = f"{gateway_url}/rollout/{rollout_id}"
        self._timeout = timeout
        self._clients: dict[str, GatewayClient] = {}
        super().__init__(
            rollout_id=rollout_id,
            engine=self._client_for(agent_name),
            sampling=sampling,
            gateway_url=gateway_url,
            auxiliary_models=auxiliary_models,
            trainable_targets=trainable_targets,
            agent_name=agent_name,
        )

    def _client_for(self, agent_name: str) -> GatewayClient:
        """One client per agent name: the agent is part of the gateway path."""
        if agent_name not in self._clients:
            self._clients[agent_name] = GatewayClient(f"{self._route}/{agent_name}/v1", self._timeout)
        return self._clients[agent_name]

    def for_agent(self, agent_name: str) -> ModelTuner:
        view = super().for_agent(agent_name)
        view.engine = self._client_for(agent_name)
        return view

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        agent_name: str | None = None,
        **sampling: Any,
    ) -> LLMCall:
        if agent_name is not None and agent_name != self.agent_name:
            return await self.for_agent(agent_name).chat(messages, tools, **sampling)
        normalized = normalize_messages(messages)
        params = replace(self.sampling, **sampling) if sampling else self.sampling
        reply = await self.engine.chat(normalized, tools, params)
        call = LLMCall(
            index=len(self._text_calls),
            agent_name=self.agent_name,
            messages=normalized,
            tools=[dict(t) for t in tools] if tools else None,
            prompt_ids=reply.prompt_ids,
            response_ids=reply.response_ids,
            finish_reason=reply.finish_reason,
            content=reply.content,
            text=reply.content,
            reasoning=reply.reasoning,
            tool_calls=[
                ToolCall(id=tc["id"], name=tc["function"]["name"], arguments=tc["function"]["arguments"])
                for tc in reply.tool_calls
            ],
            trainable=False,
        )
        self._text_calls.append(call)
        return call

    async def aclose(self) -> None:
        await super().aclose()
        for client in self._clients.values():
            await client.aclose()


def remote_model_tuner_class() -> type[RemoteModelTuner]:
    """`RemoteModelTuner`, also an AgentScope chat model when the workflow uses AgentScope."""
    if "agentscope" not in sys.modules:
        return RemoteModelTuner
    from astuner.rollout.agentscope_model import installed_agentscope_model_tuner_class

    # The AgentScope class's __call__ ends in self.chat(), which this class sends to the gateway.
    return type(
        "AgentScopeRemoteModelTuner", (RemoteModelTuner, installed_agentscope_model_tuner_class()), {}
    )


# ------------------------------------------------------------------ worker side

# per worker process: config key -> (config, loaded workflow)
_LOADED: dict[str, tuple[AstunerConfig, Any]] = {}


def _loaded_workflow(key: str, config: AstunerConfig, search_paths: Sequence[str]) -> Any:
    if key not in _LOADED:
        from astuner.plugins import Plugins
        from astuner.rollout.workflow import load_workflow

        for folder in reversed(search_paths):
            if folder not in sys.path:
                sys.path.insert(0, folder)
        _LOADED[key] = (config, load_workflow(config, Plugins()))
    return _LOADED[key][1]


async def _run_workflow(
    key: str, config: AstunerConfig, search_paths: Sequence[str], job: dict[str, Any]
) -> WorkflowOutput:
    workflow = _loaded_workflow(key, config, search_paths)
    cls = remote_model_tuner_class()
    timeout = config.rollout.rollout_timeout
    auxiliary = {
        name: cls(
            rollout_id=auxiliary_rollout_id(job["rollout_id"], name),
            gateway_url=job["gateway_url"],
            sampling=SamplingParams(**sampling),
            timeout=timeout,
            agent_name=name,
        )
        for name, sampling in job["auxiliary_sampling"].items()
    }
    tuner = cls(
        rollout_id=job["rollout_id"],
        gateway_url=job["gateway_url"],
        sampling=SamplingParams(**job["sampling"]),
        timeout=timeout,
        trainable_targets=job["trainable_targets"],
        auxiliary_models=auxiliary,
    )
    workflow_task = WorkflowTask(
        task=Task.model_validate_json(job["task"]),
        group_id=job["group_id"],
        rollout_id=job["rollout_id"],
        repeat_index=job["repeat_index"],
        config=config,
    )
    try:
        output = await workflow.run(workflow_task, tuner)
        return output.with_judge_input(tuner.judge_input)
    finally:
        for handle in (tuner, *auxiliary.values()):
            await handle.aclose()


def run_in_worker(
    key: str, config: AstunerConfig, search_paths: Sequence[str], job: dict[str, Any]
) -> tuple[WorkflowOutput | None, str | None]:
    """The Ray task: run one workflow; `(output, None)`, or `(None, traceback)` when it raised."""
    try:
        return asyncio.run(_run_workflow(key, config, search_paths, job)), None
    except Exception:
        return None, traceback.format_exc()


# ------------------------------------------------------------------ driver side


class RayExecutor:
    """Sends each rollout's workflow call to a Ray task; everything else stays in the runner."""

    def __init__(self, config: AstunerConfig) -> None:
        self.config = config
        self.key = uuid.uuid4().hex
        self._remote: Any = None
        self._config_ref: Any = None

    def _connect(self) -> None:
        import ray

        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS") or "local"
            ray.init(address=address, include_dashboard=False, logging_level="WARNING")
        if self._remote is None:
            # A workflow is not idempotent (it may act on the world): never rerun it on a worker crash.
            self._remote = ray.remote(num_cpus=1, max_retries=0)(run_in_worker)
            self._config_ref = ray.put(self.config)

    def _check(self, runner: RolloutRunner) -> None:
        if runner.gym_env_factory is not None:
            raise AstunerError(
                "rollout.executor: ray cannot run workflows whose tasks need a per-run environment "
                "(the environment client lives in the driver): use rollout.executor: local with this reader."
            )
        if runner.gateway is None:
            raise AstunerError("rollout.executor: ray needs the runner's gateway (rollout_stack starts it).")

    @asynccontextmanager
    async def session(self, runner: RolloutRunner) -> AsyncIterator[None]:
        """Connect to Ray; serve the gateway on `ASTUNER_GATEWAY_HOST` for remote nodes if set."""
        self._check(runner)
        self._connect()
        host = os.environ.get(GATEWAY_HOST_ENV)
        if not host or host == runner.gateway.host:
            yield
            return
        local = runner.gateway
        async with Gateway(host=host) as public:
            runner.gateway = public
            try:
                yield
            finally:
                runner.gateway = local

    async def run_workflow(
        self, runner: RolloutRunner, workflow_task: WorkflowTask, tuner: ModelTuner
    ) -> WorkflowOutput:
        """The workflow's output, computed in a Ray worker against this rollout's gateway route."""
        import ray

        self._check(runner)
        self._connect()
        job = {
            "task": workflow_task.task.model_dump_json(),
            "group_id": workflow_task.group_id,
            "rollout_id": workflow_task.rollout_id,
            "repeat_index": workflow_task.repeat_index,
            "sampling": asdict(tuner.sampling),
            "auxiliary_sampling": {name: asdict(h.sampling) for name, h in tuner.auxiliary_models.items()},
            "gateway_url": tuner.gateway_url,
            "trainable_targets": list(tuner.trainable_targets),
        }
        paths = [str(p.resolve()) for p in self.config.search_paths()]
        ref = self._remote.remote(self.key, self._config_ref, paths, job)
        try:
            output, error = await ref
        except asyncio.CancelledError:
            ray.cancel(ref, force=True)  # the rollout timed out or was cancelled: stop its worker too
            raise
        if error is not None:
            raise RemoteWorkflowError(f"The workflow raised in a Ray worker:\n{error}")
        return output
