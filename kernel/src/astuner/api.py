"""The public plugin API: the one kernel module a plugin imports.

Everything a plugin author may use is re-exported here from where it lives
in the kernel, so a plugin writes `from astuner.api import Task, hookimpl`
and never reaches into `astuner.core`, `astuner.rollout` or any other
internal module (a meta-test holds every plugin in this repository to it).
The names in `__all__` are the stable surface; the kernel's own modules may
be moved or split without notice.

The hooks a plugin implements are specified in `astuner.hookspecs`; what
their factories return is typed by the protocols below. An optional
capability (a reader that also serves gym environments, a judge that
scores whole rollouts, ...) is a `Protocol` too, checked with `isinstance`.
A plugin module whose run-time requirements may be missing defines
`astuner_readiness()` (`ReportsReadiness`), returning `None` or `NotReady`.

A few helpers live in modules that pull in the rollout gateway or numpy;
they are loaded on first use, so importing this module (as every plugin's
registration module does) stays cheap for `astuner --help` and
`astuner plugins list`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from astuner.cache import build_once, cache_dir
from astuner.checkpoint_model import checkpoint_of
from astuner.cli import ConfOption, OverrideOption, handle_user_errors, is_verbose
from astuner.companions import (
    COMPANION_ARGS,
    Companion,
    companion_requests,
    companions_for_run,
    free_port,
    stop_with_parent,
)
from astuner.components import (
    Engines,
    SettingsOf,
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
from astuner.core.health import HealthMonitor, run_health
from astuner.core.madness import MadnessCheck
from astuner.core.merge import MergeReport, PrefixBreak, merge_trajectory
from astuner.core.metrics import agent_metrics, pass_at_k, rollout_metrics, scalar_reward, succeeded
from astuner.core.one_temperature import other_temperature_warning, untrain_other_temperatures
from astuner.core.task import JudgeOutput, Task, WorkflowOutput, WorkflowTask
from astuner.core.tokenizer import (
    BUILTIN_PREFIX,
    SMOLLM2,
    ChatTokenizer,
    gguf_to_hf_tokenizer,
    load_tokenizer,
    smollm2_gguf_path,
)
from astuner.core.trajectory import LLMCall, Sample, ToolCall, Trajectory
from astuner.errors import AstunerError, ConfigError, PluginError
from astuner.hookspecs import Register, hookimpl
from astuner.lifecycle import RunLifecycle, Runs
from astuner.logs import close_log_file, configure_logging, get_logger, log_to_file, warn_once
from astuner.notify import Notifier, RunSummary
from astuner.plugins import NotReady, Plugins
from astuner.protocols import (
    Backbone,
    ClosesAsync,
    DescribesEngineConfig,
    FindsCheckpoints,
    FollowsPolicy,
    HasTokenizerPath,
    Judge,
    JudgesWholeRollouts,
    ProvidesGymEnvs,
    ReportsReadiness,
    RunContext,
    ServesAdapters,
    ServesPage,
    Split,
    TaskReader,
    WorkflowExecutor,
)
from astuner.ray_cluster import ray_head_for_run, require_gpus
from astuner.record import (
    ExperimentDir,
    append_lines,
    append_rows,
    append_trajectories,
    read_metrics,
    read_trajectories,
    strict_json,
)
from astuner.record_lines import clipped_characters, load_trajectory
from astuner.rollout.agents import AgentPlan, agent_plan, refuse_agent_adapters
from astuner.rollout.agentscope_model import model_tuner_class
from astuner.rollout.auxiliary import auxiliary_rollout_id
from astuner.rollout.engine import (
    ChatEngine,
    ChatReply,
    FinishReason,
    Generation,
    SamplingParams,
    TokenEngine,
)
from astuner.rollout.engine_model import EngineModel
from astuner.rollout.model_tuner import ModelTuner
from astuner.rollout.sampling import sampling_from_config
from astuner.rollout.workflow import Workflow, load_workflow
from astuner.run_records import RunRecords
from astuner.run_status import STATUS_FILE, RunStatus, read_status, tracking
from astuner.translation import Source, apply_rules, engine_settings, flatten, lookup, nest

if TYPE_CHECKING:
    from astuner.core.advantages import (
        advantage_estimators,
        canonical_estimator,
        compute_advantages,
        estimator_counterparts,
        estimator_names,
    )
    from astuner.rollout.episode import EpisodeSource, reward_of
    from astuner.rollout.gateway import Gateway
    from astuner.rollout.runner import RolloutRunner
    from astuner.rollout.stack import RolloutParts, rollout_stack, runner_settings_from_config
    from astuner.serving import ThreadedServer

# Names whose modules pull in the rollout gateway (fastapi, uvicorn) or numpy:
# resolved by `__getattr__` on first use rather than when a plugin registers.
_LAZY: dict[str, str] = {
    "advantage_estimators": "astuner.core.advantages",
    "canonical_estimator": "astuner.core.advantages",
    "estimator_counterparts": "astuner.core.advantages",
    "estimator_names": "astuner.core.advantages",
    "compute_advantages": "astuner.core.advantages",
    "EpisodeSource": "astuner.rollout.episode",
    "Gateway": "astuner.rollout.gateway",
    "reward_of": "astuner.rollout.episode",
    "RolloutRunner": "astuner.rollout.runner",
    "RolloutParts": "astuner.rollout.stack",
    "rollout_stack": "astuner.rollout.stack",
    "runner_settings_from_config": "astuner.rollout.stack",
    "ThreadedServer": "astuner.serving",
}

# Grouped by topic, not sorted: the "Write a plugin" docs page lists the names in this order.
__all__ = [  # noqa: RUF022
    # the plugin contract
    "Backbone",
    "Companion",
    "Judge",
    "MadnessCheck",
    "NotReady",
    "Notifier",
    "Plugins",
    "Register",
    "RunContext",
    "Split",
    "TaskReader",
    "WorkflowExecutor",
    "hookimpl",
    # optional capabilities, checked with isinstance
    "ClosesAsync",
    "DescribesEngineConfig",
    "HasTokenizerPath",
    "JudgesWholeRollouts",
    "FindsCheckpoints",
    "FollowsPolicy",
    "ProvidesGymEnvs",
    "ReportsReadiness",
    "ServesAdapters",
    "ServesPage",
    # tasks, workflows and judging
    "JudgeOutput",
    "ModelTuner",
    "Task",
    "Workflow",
    "WorkflowOutput",
    "WorkflowTask",
    "load_workflow",
    "model_tuner_class",
    "auxiliary_rollout_id",
    # multi-agent workflows: which agents train, and their adapters
    "AgentPlan",
    "agent_plan",
    "refuse_agent_adapters",
    # trajectories and samples
    "LLMCall",
    "MergeReport",
    "PrefixBreak",
    "Sample",
    "ToolCall",
    "Trajectory",
    "merge_trajectory",
    "untrain_other_temperatures",
    "other_temperature_warning",
    "agent_metrics",
    "pass_at_k",
    "rollout_metrics",
    "scalar_reward",
    "succeeded",
    # engines and tokenizers
    "BUILTIN_PREFIX",
    "SMOLLM2",
    "ChatEngine",
    "ChatReply",
    "EngineModel",
    "Engines",
    "SettingsOf",
    "WorkflowSource",
    "main_engine_model",
    "ChatTokenizer",
    "FinishReason",
    "Generation",
    "SamplingParams",
    "sampling_from_config",
    "normalize_messages",
    "TokenEngine",
    "gguf_to_hf_tokenizer",
    "load_tokenizer",
    "smollm2_gguf_path",
    # config and plugin settings
    "AstunerConfig",
    "Source",
    "apply_rules",
    "build",
    "build_reader",
    "check_plugin_blocks",
    "engine_name",
    "engine_settings",
    "flatten",
    "load_config",
    "load_yaml",
    "lookup",
    "nest",
    "plugin_settings",
    # errors
    "AstunerError",
    "ConfigError",
    "PluginError",
    # demonstrations (supervised fine-tuning)
    "DemonstrationError",
    "demonstration_trajectory",
    "read_demonstrations",
    "read_json_lines",
    # experiment records, logging and caches
    "ExperimentDir",
    "HealthMonitor",
    "run_health",
    "append_lines",
    "append_rows",
    "append_trajectories",
    "strict_json",
    "load_trajectory",
    "clipped_characters",
    "build_once",
    "cache_dir",
    "configure_logging",
    "get_logger",
    "log_to_file",
    "close_log_file",
    "warn_once",
    "RunSummary",
    "read_metrics",
    "read_trajectories",
    "RunStatus",
    "STATUS_FILE",
    "read_status",
    "tracking",
    "checkpoint_of",
    # command-line helpers
    "ConfOption",
    "OverrideOption",
    "handle_user_errors",
    "is_verbose",
    "COMPANION_ARGS",
    "companion_requests",
    "companions_for_run",
    "Runs",
    "RunLifecycle",
    # processes and servers a plugin starts for a run
    "free_port",
    "stop_with_parent",
    # Ray and GPUs
    "ray_head_for_run",
    "require_gpus",
    # running rollouts and computing advantages (imported on first use: they load the gateway and numpy)
    "EpisodeSource",
    "RolloutRunner",
    "Gateway",
    "advantage_estimators",
    "canonical_estimator",
    "estimator_counterparts",
    "estimator_names",
    "compute_advantages",
    "reward_of",
    "RolloutParts",
    "rollout_stack",
    "runner_settings_from_config",
    # reading a run's records
    "RunRecords",
    # serving a web app from a thread (imported on first use: it loads uvicorn)
    "ThreadedServer",
]


def __getattr__(name: str) -> Any:
    """Load a name listed in `_LAZY` from its module the first time a plugin asks for it."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'astuner.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """List the public names, the lazily loaded ones included."""
    return sorted(__all__)
