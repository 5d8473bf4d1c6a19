"""astuner: train LLM agents with reinforcement learning.

Bring a workflow (your agent), a judge (turns an outcome into a reward) and
a task set; astuner runs, records, scores and trains.

The names below are loaded on first use, so that `import astuner.hookspecs`
or `import astuner.api` (what every plugin does while `astuner --help`
starts) does not pay for `tune()` and the config models behind it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from astuner.breakpoints import bp
    from astuner.core.task import JudgeOutput, Task, WorkflowOutput, WorkflowTask
    from astuner.hookspecs import hookimpl
    from astuner.rollout.model_tuner import ModelTuner
    from astuner.rollout.workflow import Workflow
    from astuner.tuner import AlgorithmConfig, DatasetConfig, TuneResult, TunerModelConfig, tune

_HOMES: dict[str, str] = {
    "AlgorithmConfig": "astuner.tuner",
    "DatasetConfig": "astuner.tuner",
    "JudgeOutput": "astuner.core.task",
    "ModelTuner": "astuner.rollout.model_tuner",
    "Task": "astuner.core.task",
    "TuneResult": "astuner.tuner",
    "TunerModelConfig": "astuner.tuner",
    "Workflow": "astuner.rollout.workflow",
    "WorkflowOutput": "astuner.core.task",
    "WorkflowTask": "astuner.core.task",
    "bp": "astuner.breakpoints",
    "hookimpl": "astuner.hookspecs",
    "tune": "astuner.tuner",
}

__all__ = [
    "AlgorithmConfig",
    "DatasetConfig",
    "JudgeOutput",
    "ModelTuner",
    "Task",
    "TuneResult",
    "TunerModelConfig",
    "Workflow",
    "WorkflowOutput",
    "WorkflowTask",
    "bp",
    "hookimpl",
    "tune",
]


def __getattr__(name: str) -> Any:
    """Import `name` from the module it lives in, the first time it is asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'astuner' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, the lazily loaded ones included."""
    return sorted(__all__)
