"""Auxiliary models: named models a workflow and its judge call, never trained.

`auxiliary_models: {NAME: {path, engine, ...}}` in the config names them
(an LLM judge, the other agents of a multi-agent workflow). The rollout
stack builds one engine per model once per run (`auxiliary_models()`), the
way the main engine is built (engines come from plugins, so the
`transformers` one stays in astuner-backbone-torch). Each rollout then gets
one handle per model (`AuxiliaryModel.handle`): a `ModelTuner`, and an
AgentScope chat model when the workflow uses AgentScope, so `chat()`,
`model=` and `openai_client()` work as they do on the main model. The
function-form workflow receives the handles as `auxiliary_models`, a class
form as `model_tuner.auxiliary_models`, and a judge as
`workflow_task.auxiliary_models` (the function-form judge as its
`auxiliary_models` argument).

A handle is untrainable: every call it records has `trainable=False` and
the model's name as `agent_name`, and the runner files those calls under
`Trajectory.auxiliary_calls`, apart from `calls`, the only list training
samples are merged from. Over the gateway a handle is its own rollout,
`<rollout id>.<NAME>`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from astuner.core.tokenizer import ChatTokenizer, load_tokenizer
from astuner.core.tracker import ContextTracker, TrackerSettings
from astuner.protocols import ClosesAsync, HasTokenizerPath
from astuner.rollout.agentscope_model import model_tuner_class
from astuner.rollout.engine import SamplingParams, TokenEngine
from astuner.rollout.model_tuner import ModelTuner
from astuner.rollout.sampling import auxiliary_sampling

if TYPE_CHECKING:
    from astuner.config_sections import AuxiliaryModelConfig, ContextTrackerConfig

EngineBuilder = Callable[[str], Any]
"""Builds the engine of the auxiliary model it is given the name of (the launch path's
`astuner.components.build_auxiliary_engine`, bound to the run)."""


def auxiliary_rollout_id(rollout_id: str, name: str) -> str:
    """The gateway's id for auxiliary model `name` within rollout `rollout_id`."""
    return f"{rollout_id}.{name}"


@dataclass
class AuxiliaryModel:
    """One auxiliary model of a run: its engine (shared by every rollout) and how it is called."""

    name: str
    engine: Any
    tokenizer: ChatTokenizer | None
    sampling: SamplingParams
    tracker: TrackerSettings

    def handle(self, rollout_id: str, gateway_url: str | None) -> ModelTuner:
        """A fresh untrainable handle for one rollout, with a context tracker of its own."""
        tracker = ContextTracker(self.tokenizer, self.tracker) if self.tokenizer is not None else None
        return model_tuner_class()(
            rollout_id=auxiliary_rollout_id(rollout_id, self.name),
            engine=self.engine,
            sampling=self.sampling,
            tracker=tracker,
            gateway_url=gateway_url,
            agent_name=self.name,
            trainable=False,
        )


def auxiliary_model(
    name: str, spec: AuxiliaryModelConfig, context_tracker: ContextTrackerConfig, engine: Any
) -> AuxiliaryModel:
    """Auxiliary model `name`, configured by its entry `spec`, around its built engine.

    `context_tracker` is the run's block of that name: its mode and environment-output limit hold
    for every model, the rest comes from `spec`.
    """
    tokenizer = None
    if isinstance(engine, TokenEngine):
        own = engine.tokenizer_path if isinstance(engine, HasTokenizerPath) else None
        tokenizer = load_tokenizer(own or spec.path)
    return AuxiliaryModel(
        name=name,
        engine=engine,
        tokenizer=tokenizer,
        sampling=auxiliary_sampling(spec),
        tracker=TrackerSettings(
            mode=context_tracker.mode,
            max_model_len=spec.max_model_len,
            max_response_length_in_one_turn=spec.max_tokens,
            max_env_len=context_tracker.max_env_len,
            tool_parser=spec.tool_parser,
            tool_format=spec.tool_format,
        ),
    )


def build_auxiliary_models(
    specs: Mapping[str, AuxiliaryModelConfig],
    context_tracker: ContextTrackerConfig,
    build_engine: EngineBuilder,
) -> dict[str, AuxiliaryModel]:
    """Every model of `specs` (`config.auxiliary_models`), its engine built now by `build_engine`;
    the caller closes the engines."""
    return {
        name: auxiliary_model(name, spec, context_tracker, build_engine(name)) for name, spec in specs.items()
    }


@asynccontextmanager
async def auxiliary_models(
    specs: Mapping[str, AuxiliaryModelConfig],
    context_tracker: ContextTrackerConfig,
    build_engine: EngineBuilder,
) -> AsyncIterator[dict[str, AuxiliaryModel]]:
    """Every model of `specs` for one run; the engines `build_engine` makes close on exit, on every path."""
    engines: list[Any] = []
    try:
        models = {}
        for name, spec in specs.items():
            engines.append(build_engine(name))
            models[name] = auxiliary_model(name, spec, context_tracker, engines[-1])
        yield models
    finally:
        for engine in engines:
            if isinstance(engine, ClosesAsync):
                await engine.aclose()
