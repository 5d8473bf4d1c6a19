"""The public plugin API: the kernel module an extension plugin imports.

An extension plugin (a reader, workflow, judge, madness check, engine,
notifier, companion, tool or command) writes `from astuner.api import Task,
hookimpl` and never reaches into `astuner.core`, `astuner.rollout` or any
other internal module; a meta-test holds every such plugin in this
repository to it. The names in `__all__` are the stable surface, at most 40
of them; the kernel's own modules may be moved or split without notice.
Backbones, workflow executors and commands that run rollouts compose a
whole training step and need more: they also import `astuner.training`.

The hooks a plugin implements are specified in `astuner.hookspecs`; what
their factories return is typed by the protocols below. An optional
capability (an engine that can be closed, ...) is a `Protocol` too, checked
with `isinstance`. A plugin module whose run-time requirements may be
missing defines `astuner_readiness()`, returning `None` or a `NotReady`.

Importing this module (as every plugin's registration module does) loads
no typer, torch, transformers, fastapi or agent framework, so
`astuner --help` and `astuner plugins list` stay fast; the few names whose
modules do are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from astuner.core.madness import MadnessCheck
from astuner.core.task import JudgeOutput, Task, WorkflowOutput, WorkflowTask
from astuner.core.tokenizer import ChatTokenizer, load_tokenizer
from astuner.core.trajectory import LLMCall, ToolCall, Trajectory
from astuner.errors import AstunerError, ConfigError
from astuner.hookspecs import Register, hookimpl
from astuner.logs import get_logger, warn_once
from astuner.notify import Notifier, RunSummary
from astuner.plugins import NotReady
from astuner.protocols import ClosesAsync, HasTokenizerPath, Judge, Split, TaskReader
from astuner.rollout.engine import ChatEngine, ChatReply, Generation, SamplingParams, TokenEngine
from astuner.rollout.engine_model import EngineModel

if TYPE_CHECKING:
    from astuner.companions import Companion, free_port, stop_with_parent
    from astuner.components import Engines, SettingsOf
    from astuner.lifecycle import Runs
    from astuner.rollout.model_tuner import ModelTuner
    from astuner.rollout.workflow import Workflow
    from astuner.run_records import RunRecords
    from astuner.serving import ThreadedServer

# Names whose modules pull in the run machinery, the rollout gateway (fastapi, uvicorn)
# or numpy: resolved by `__getattr__` on first use rather than when a plugin registers.
_LAZY: dict[str, str] = {
    "Companion": "astuner.companions",
    "free_port": "astuner.companions",
    "stop_with_parent": "astuner.companions",
    "Engines": "astuner.components",
    "SettingsOf": "astuner.components",
    "Runs": "astuner.lifecycle",
    "ModelTuner": "astuner.rollout.model_tuner",
    "Workflow": "astuner.rollout.workflow",
    "RunRecords": "astuner.run_records",
    "ThreadedServer": "astuner.serving",
}

# Grouped by topic, not sorted: the "Write a plugin" docs page lists the names in this order.
__all__ = [  # noqa: RUF022
    # the plugin contract
    "hookimpl",
    "Register",
    "NotReady",
    # tasks, workflows and judging
    "Task",
    "TaskReader",
    "Split",
    "Workflow",
    "ModelTuner",
    "WorkflowTask",
    "WorkflowOutput",
    "Judge",
    "JudgeOutput",
    "MadnessCheck",
    # what a run records
    "Trajectory",
    "LLMCall",
    "ToolCall",
    # engines and tokenizers
    "TokenEngine",
    "ChatEngine",
    "Generation",
    "ChatReply",
    "SamplingParams",
    "EngineModel",
    "ClosesAsync",
    "HasTokenizerPath",
    "ChatTokenizer",
    "load_tokenizer",
    # services a factory may ask for by name
    "Engines",
    "SettingsOf",
    # notifiers, companions and commands
    "Notifier",
    "RunSummary",
    "Companion",
    "Runs",
    # reading a run's records
    "RunRecords",
    # processes and servers a plugin starts
    "free_port",
    "stop_with_parent",
    "ThreadedServer",
    # errors and logging
    "AstunerError",
    "ConfigError",
    "get_logger",
    "warn_once",
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
