"""astuner: train LLM agents with reinforcement learning.

Bring a workflow (your agent), a judge (turns an outcome into a reward) and
a task set; astuner runs, records, scores and trains.
"""

from astuner.breakpoints import bp
from astuner.core.task import JudgeOutput, Task, WorkflowOutput, WorkflowTask
from astuner.hookspecs import hookimpl
from astuner.rollout.model_tuner import ModelTuner
from astuner.rollout.workflow import Workflow
from astuner.tuner import AlgorithmConfig, DatasetConfig, TuneResult, TunerModelConfig, tune

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
