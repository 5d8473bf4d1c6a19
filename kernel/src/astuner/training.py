"""The public API for backbones, executors and commands that run rollouts.

`astuner.api` is what an extension plugin (a reader, judge, engine,
notifier, ...) imports. A plugin that composes a whole training step, a
backbone (torch, verl, Trinity-RFT), a workflow executor (Ray) or a command
that runs rollouts (`astuner eval`), needs more of the kernel: the run's
whole config, the rollout stack, merging trajectories into samples,
advantages and the run's records. Those names live here, so that
`astuner.api` stays small for the many and this module serves the few:

    from astuner.api import Task, Trajectory, hookimpl
    from astuner.training import RunContext, merge_trajectory, rollout_stack

Like `astuner.api`, only the names in `__all__` are stable; the kernel's
own modules may move without notice. Names whose modules load the rollout
gateway (fastapi, uvicorn) or numpy are imported on first use, so a
backbone's registration module imports this one cheaply.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from astuner.algorithms import (
    ChosenLoss,
    LossSettings,
    PolicyLossSettings,
    advantage_estimator,
    algorithm_counterpart,
    algorithm_names,
    policy_loss,
    policy_loss_settings,
)
from astuner.cache import build_once, cache_dir
from astuner.checkpoint_model import checkpoint_of
from astuner.components import (
    RunUses,
    WorkflowSource,
    build,
    build_reader,
    check_plugin_blocks,
    engine_name,
    main_engine_model,
    plugin_settings,
)
from astuner.config import AstunerConfig, load_config
from astuner.config_yaml import load_yaml
from astuner.core.chat import normalize_messages
from astuner.core.demonstrations import (
    DemonstrationError,
    demonstration_trajectory,
    read_demonstrations,
    read_json_lines,
)
from astuner.core.health import HealthMonitor, console_fields
from astuner.core.merge import MergeReport, merge_trajectory
from astuner.core.metric_catalog import HealthRule, Metric, MetricCatalog, metric_catalog
from astuner.core.metrics import pass_at_k, rollout_metrics, scalar_reward, succeeded
from astuner.core.one_temperature import other_temperature_warning, untrain_other_temperatures
from astuner.core.tokenizer import BUILTIN_PREFIX, SMOLLM2, gguf_to_hf_tokenizer, smollm2_gguf_path
from astuner.core.trajectory import Sample
from astuner.errors import PluginError
from astuner.plugins import Plugins
from astuner.protocols import (
    Backbone,
    DeclaresRunUses,
    DescribesEngineConfig,
    FindsCheckpoints,
    FollowsPolicy,
    JudgesWholeRollouts,
    ProvidesGymEnvs,
    RunContext,
    ServesAdapters,
    WorkflowExecutor,
)
from astuner.ray_cluster import ray_head_for_run, require_gpus
from astuner.record import ExperimentDir, append_rows, append_trajectories, read_trajectories, strict_json
from astuner.rollout.agents import AgentPlan, agent_plan, refuse_agent_adapters
from astuner.rollout.agentscope_model import model_tuner_class
from astuner.rollout.auxiliary import auxiliary_rollout_id
from astuner.rollout.engine import FinishReason
from astuner.rollout.sampling import sampling_from_config
from astuner.translation import Source, apply_rules, engine_settings, flatten, lookup, nest

if TYPE_CHECKING:
    from astuner.cli import ConfOption, OverrideOption, handle_user_errors
    from astuner.companions import COMPANION_ARGS, companion_requests
    from astuner.core.advantages import AdvantageReport, Estimator, compute_advantages
    from astuner.lifecycle import RunLifecycle
    from astuner.rollout.episode import EpisodeSource, reward_of
    from astuner.rollout.gateway import Gateway
    from astuner.rollout.progress import progress_heartbeat
    from astuner.rollout.runner import RolloutRunner
    from astuner.rollout.stack import RolloutParts, rollout_stack, runner_settings_from_config

# Names whose modules load typer, the rollout gateway (fastapi, uvicorn) or numpy:
# resolved by `__getattr__` on first use rather than when a backbone registers.
_LAZY: dict[str, str] = {
    "RunLifecycle": "astuner.lifecycle",
    "ConfOption": "astuner.cli",
    "OverrideOption": "astuner.cli",
    "handle_user_errors": "astuner.cli",
    "COMPANION_ARGS": "astuner.companions",
    "companion_requests": "astuner.companions",
    "compute_advantages": "astuner.core.advantages",
    "AdvantageReport": "astuner.core.advantages",
    "Estimator": "astuner.core.advantages",
    "EpisodeSource": "astuner.rollout.episode",
    "Gateway": "astuner.rollout.gateway",
    "progress_heartbeat": "astuner.rollout.progress",
    "reward_of": "astuner.rollout.episode",
    "RolloutRunner": "astuner.rollout.runner",
    "RolloutParts": "astuner.rollout.stack",
    "rollout_stack": "astuner.rollout.stack",
    "runner_settings_from_config": "astuner.rollout.stack",
}

# Grouped by topic, not sorted: the "Write a backbone" docs page lists the names in this order.
__all__ = [  # noqa: RUF022
    # what a backbone and an executor are
    "Backbone",
    "RunContext",
    "WorkflowExecutor",
    "WorkflowSource",
    "Plugins",
    "PluginError",
    "RunLifecycle",
    "RunUses",
    # optional capabilities of backbones and engines, checked with isinstance
    "DeclaresRunUses",
    "DescribesEngineConfig",
    "FindsCheckpoints",
    "FollowsPolicy",
    "ServesAdapters",
    # capabilities of readers and judges that backbones and the runner ask about
    "ProvidesGymEnvs",
    "JudgesWholeRollouts",
    # the run's config and the plugins it names
    "AstunerConfig",
    "load_config",
    "load_yaml",
    "check_plugin_blocks",
    "plugin_settings",
    "build",
    "build_reader",
    "engine_name",
    "main_engine_model",
    # translating the config into an engine's own (verl, Trinity-RFT)
    "Source",
    "apply_rules",
    "engine_settings",
    "flatten",
    "lookup",
    "nest",
    # running rollouts
    "RolloutParts",
    "rollout_stack",
    "runner_settings_from_config",
    "RolloutRunner",
    "EpisodeSource",
    "reward_of",
    "Gateway",
    "sampling_from_config",
    "model_tuner_class",
    "auxiliary_rollout_id",
    "normalize_messages",
    "FinishReason",
    # multi-agent workflows: which agents train, and their adapters
    "AgentPlan",
    "agent_plan",
    "refuse_agent_adapters",
    # the pieces of a training step: samples, advantages, metrics
    "Sample",
    "MergeReport",
    "merge_trajectory",
    "untrain_other_temperatures",
    "other_temperature_warning",
    "compute_advantages",
    "AdvantageReport",
    # the training algorithms the config chooses among the plugins' (advantage estimators, policy losses)
    "Estimator",
    "advantage_estimator",
    "PolicyLossSettings",
    "LossSettings",
    "ChosenLoss",
    "policy_loss",
    "policy_loss_settings",
    "algorithm_counterpart",
    "algorithm_names",
    "pass_at_k",
    "rollout_metrics",
    "scalar_reward",
    "succeeded",
    "HealthMonitor",
    # the metrics' declarations (`register_metrics`): labels, units, console line, health rules
    "Metric",
    "HealthRule",
    "MetricCatalog",
    "metric_catalog",
    "console_fields",
    # the built-in model and tokenizer files
    "BUILTIN_PREFIX",
    "SMOLLM2",
    "gguf_to_hf_tokenizer",
    "smollm2_gguf_path",
    # demonstrations (supervised fine-tuning)
    "DemonstrationError",
    "demonstration_trajectory",
    "read_demonstrations",
    "read_json_lines",
    # the run's folder and records
    "ExperimentDir",
    "append_rows",
    "append_trajectories",
    "read_trajectories",
    "strict_json",
    "checkpoint_of",
    "build_once",
    "cache_dir",
    # command-line helpers for commands that run rollouts
    "ConfOption",
    "OverrideOption",
    "handle_user_errors",
    "COMPANION_ARGS",
    "companion_requests",
    "progress_heartbeat",
    # Ray and GPUs
    "ray_head_for_run",
    "require_gpus",
]


def __getattr__(name: str) -> Any:
    """Load a name listed in `_LAZY` from its module the first time it is asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'astuner.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """List the public names, the lazily loaded ones included."""
    return sorted(__all__)
