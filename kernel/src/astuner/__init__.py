"""astuner: train LLM agents with reinforcement learning.

Bring a workflow (your agent), a judge (turns an outcome into a reward) and
a task set; astuner runs, records, scores and trains.
"""

from astuner.core.task import JudgeOutput, Task, WorkflowOutput
from astuner.hookspecs import hookimpl

__all__ = ["JudgeOutput", "Task", "WorkflowOutput", "hookimpl"]
