"""Build the whole rollout side from a config: engines, tokenizer, workflow, judge, checks, gateway.

Backbones use `rollout_stack(config, plugins)`; the `torch` backbone passes
its own engine (the policy being trained) instead of building one.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from astuner.components import (
    build_auxiliary_engine,
    build_engine,
    build_executor,
    build_judge,
    build_reader,
    plugin_settings,
)
from astuner.config import AstunerConfig
from astuner.core.madness import MadnessCheck
from astuner.core.tokenizer import ChatTokenizer, load_tokenizer
from astuner.core.toolformat import resolve_tool_format, template_renders_tools
from astuner.core.tracker import TrackerSettings
from astuner.logs import get_logger
from astuner.plugins import Plugins
from astuner.protocols import (
    ClosesAsync,
    HasTokenizerPath,
    Judge,
    ProvidesGymEnvs,
    TaskReader,
    WorkflowExecutor,
)
from astuner.rollout.agents import AgentPlan, agent_plan
from astuner.rollout.auxiliary import AuxiliaryModel, auxiliary_models
from astuner.rollout.engine import TokenEngine
from astuner.rollout.gateway import Gateway
from astuner.rollout.judging import load_judge
from astuner.rollout.runner import RolloutRunner, RunnerSettings
from astuner.rollout.sampling import sampling_from_config as sampling_from_config
from astuner.rollout.workflow import LoadedWorkflow, load_workflow


def runner_settings_from_config(config: AstunerConfig, max_parallel: int | None = None) -> RunnerSettings:
    """The `RolloutRunner` settings of `config`; `max_parallel`, if given, replaces `max_env_worker`."""
    r, ct = config.rollout, config.context_tracker
    return RunnerSettings(
        max_env_worker=max_parallel or r.max_env_worker,
        rollout_timeout=r.rollout_timeout,
        agent_madness_reward=r.agent_madness_reward,
        agent_madness_termination=r.agent_madness_termination,
        disable_toolcalls=r.disable_toolcalls,
        tracker=TrackerSettings(
            mode=ct.mode,
            max_model_len=r.max_model_len,
            max_response_length_in_one_turn=r.max_response_length_in_one_turn,
            max_env_len=ct.max_env_len,
            tool_parser=ct.tool_parser,
            tool_format=config.model.tool_format,
            tool_demonstration=tuple(config.model.tool_demonstration),
        ),
    )


def report_tool_format(tokenizer: ChatTokenizer, config: AstunerConfig) -> None:
    """One log line on how tools reach the model; a warning when they cannot (see `ToolFormatNotice`)."""
    model = config.model
    renders = template_renders_tools(tokenizer)
    log = get_logger()
    if model.tool_format == "template" and not renders:
        log.warning(
            f"model.tool_format is 'template', but the chat template of '{model.path}' renders no "
            "tools and drops past tool calls: an agent's tools never reach the model. Set "
            "model.tool_format: auto (astuner then writes them into the messages)."
        )
        return
    fmt = resolve_tool_format(tokenizer, model.tool_format, config.context_tracker.tool_parser)
    if fmt.name == "template":
        how = "the chat template renders them"
    elif renders:
        how = "astuner writes them into the messages (model.tool_format: hermes)"
    else:
        how = "the chat template renders none, so astuner writes them into the messages"
    demo = "with" if model.tool_demonstration else "without"
    log.info(f"tool format: {fmt.name} ({how}; {demo} a demonstration; replies read by '{fmt.parser}')")


class ToolFormatNotice:
    """`report_tool_format`, once a run, at the first model call that offers tools.

    When the stack is built nobody knows yet whether the workflow passes
    tools (werewolves passes none), and a line about tool formats on a run
    without tools is noise. So every rollout's tracker calls this notice
    at each call with tools, and only the first call reports. One notice
    serves a run's rollouts (`RolloutParts`), from several threads under
    Trinity.
    """

    def __init__(self, config: AstunerConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._told = False

    def __call__(self, tokenizer: ChatTokenizer) -> None:
        """Report for `tokenizer` unless an earlier call has."""
        with self._lock:
            if self._told:
                return
            self._told = True
        report_tool_format(tokenizer, self._config)


def build_madness_checks(config: AstunerConfig, plugins: Plugins) -> dict[str, MadnessCheck]:
    checks = {}
    for name in config.rollout.compute_madness_checklist:
        reg = plugins.get("madness_check", name, search_paths=config.search_paths())
        checks[name] = reg.build(plugin_settings(config, reg))
    return checks


def environment_factory(config: AstunerConfig, plugins: Plugins, reader: TaskReader | None = None) -> Any:
    """The configured reader's per-run environment maker, or None when its tasks need none.

    A reader whose tasks each need an environment of their own (the
    `ProvidesGymEnvs` protocol) has `gym_env_factory()`; what it returns is
    called once per run (see `RolloutRunner`) and, if it has `aclose()`, is
    closed with the stack. `reader`: the run's reader, when the
    caller has built it already (a reader is built once per run).
    """
    if reader is None:
        reader = build_reader(config, plugins)
    return reader.gym_env_factory() if isinstance(reader, ProvidesGymEnvs) else None


@dataclass(frozen=True)
class RolloutParts:
    """What every run of a rollout stack shares and neither an event loop nor an engine owns.

    Built once per astuner run, and once per worker process under verl and
    Trinity (`astuner.rollout.episode`): the workflow, the judge, the madness
    checks, the environment maker, the executor (`rollout.executor`; None
    for `local`), the agent plan (`agents`, with the workflow's trainable
    targets) and the run's one `ToolFormatNotice`. `runner()` binds them to
    an engine, its tokenizer, a gateway and the auxiliary models.
    """

    config: AstunerConfig
    workflow: LoadedWorkflow
    judge: Judge
    madness_checks: Mapping[str, MadnessCheck]
    gym_env_factory: Any
    agents: AgentPlan
    executor: WorkflowExecutor | None = None
    tool_notice: ToolFormatNotice | None = None

    @classmethod
    def build(cls, config: AstunerConfig, plugins: Plugins, reader: TaskReader | None = None) -> RolloutParts:
        """Load the workflow, judge and checks; `reader` is the run's reader if the caller has one."""
        # The workflow loads first: a typo in it should fail before a model loads.
        workflow = load_workflow(config.rollout.agentscope_workflow, plugins, config.search_paths())
        judge = load_judge(
            config.task_judge.judge_protocol,
            plugins,
            config.search_paths(),
            build_registered=partial(build_judge, config, plugins),
            judge_config=config,
        )
        checks = build_madness_checks(config, plugins)
        gym_env_factory = environment_factory(config, plugins, reader)
        agents = agent_plan(
            config.agents,
            workflow.trainable_targets,
            trainable_targets=config.rollout.trainable_targets,
            shared_lora_rank=config.model.lora.rank,
        )
        executor = build_executor(config, plugins)
        notice = ToolFormatNotice(config)
        return cls(config, workflow, judge, checks, gym_env_factory, agents, executor, notice)

    def runner(
        self,
        *,
        engine: Any,
        tokenizer: ChatTokenizer | None,
        gateway: Gateway,
        auxiliary: Mapping[str, AuxiliaryModel],
        max_parallel: int | None = None,
    ) -> RolloutRunner:
        """A runner over these parts; `engine` None when every run brings its own (`run_one(engine=)`)."""
        return RolloutRunner(
            workflow=self.workflow,
            judge=self.judge,
            engine=engine,
            tokenizer=tokenizer,
            settings=runner_settings_from_config(self.config, max_parallel),
            madness_checks=self.madness_checks,
            gateway=gateway,
            auxiliary_models=auxiliary,
            agents=self.agents,
            workflow_config=self.config,
            gym_env_factory=self.gym_env_factory,
            executor=self.executor,
            tool_notice=self.tool_notice,
        )

    async def aclose(self) -> None:
        """Close the environment maker, which releases any environment still open."""
        if isinstance(self.gym_env_factory, ClosesAsync):
            await self.gym_env_factory.aclose()


def engine_tokenizer(config: AstunerConfig, engine: Any) -> ChatTokenizer | None:
    """A token engine's chat tokenizer (its `tokenizer_path`, else `model.path`); None for a chat engine."""
    if not isinstance(engine, TokenEngine):
        return None
    own = engine.tokenizer_path if isinstance(engine, HasTokenizerPath) else None
    return load_tokenizer(own or config.model.path)


@asynccontextmanager
async def rollout_stack(
    config: AstunerConfig,
    plugins: Plugins,
    *,
    engine: Any = None,
    max_parallel: int | None = None,
    auxiliary: Mapping[str, AuxiliaryModel] | None = None,
    reader: TaskReader | None = None,
    parts: RolloutParts | None = None,
) -> AsyncIterator[RolloutRunner]:
    """A ready `RolloutRunner`; the gateway, the environments (and engines built here) stop on exit.

    The auxiliary models of `config.auxiliary_models` are built here, once,
    unless `auxiliary` hands them in already built (they then stay open).
    A backbone that has built the reader for its tasks hands it in as
    `reader`, so that it is not built twice; one that needed the workflow
    before its engine (its `trainable_targets` decide which adapters to
    load) hands in the `parts` it built, and closes them itself.
    """
    own_parts = parts is None
    if parts is None:
        parts = RolloutParts.build(config, plugins, reader)
    own_engine = engine is None
    try:
        if own_engine:
            engine = build_engine(config, plugins)
        async with AsyncExitStack() as stack:
            if auxiliary is None:
                auxiliary = await stack.enter_async_context(
                    auxiliary_models(
                        config.auxiliary_models,
                        config.context_tracker,
                        partial(build_auxiliary_engine, config, plugins),
                    )
                )
            gateway = await stack.enter_async_context(Gateway())
            tokenizer = engine_tokenizer(config, engine)
            yield parts.runner(
                engine=engine,
                tokenizer=tokenizer,
                gateway=gateway,
                auxiliary=auxiliary,
                max_parallel=max_parallel,
            )
    finally:
        if own_parts:
            await parts.aclose()
        if own_engine and isinstance(engine, ClosesAsync):
            await engine.aclose()
