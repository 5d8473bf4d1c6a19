"""The shapes of the things plugins register.

Factories registered through the hooks in `astuner.hookspecs` return
objects of these shapes. They are protocols: any class with the right
methods qualifies, no base class needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from astuner.core.task import JudgeOutput, Task, WorkflowOutput

if TYPE_CHECKING:
    from astuner.config import AstunerConfig
    from astuner.plugins import Plugins
    from astuner.record import ExperimentDir

Split = Literal["train", "validation"]


@runtime_checkable
class TaskReader(Protocol):
    """Yields the tasks of one split, in a stable order."""

    def read(self, split: Split) -> Iterator[Task]: ...


@runtime_checkable
class Judge(Protocol):
    """Turns one run's outcome into a reward."""

    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput: ...


@dataclass
class RunContext:
    """Everything a backbone gets for one `astuner run`."""

    config: AstunerConfig
    experiment: ExperimentDir
    plugins: Plugins
    with_ray: bool = False


@runtime_checkable
class Backbone(Protocol):
    """Runs (and usually trains) with the resolved config."""

    def run(self, ctx: RunContext) -> None: ...
