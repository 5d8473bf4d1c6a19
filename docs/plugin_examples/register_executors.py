"""An executor `timed`: runs each workflow in this process and adds its wall time to the rollout's metrics."""

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from astuner.api import ModelTuner, Register, WorkflowOutput, WorkflowTask, hookimpl
from astuner.training import RolloutRunner


class TimedExecutor:
    @asynccontextmanager
    async def session(self, runner: RolloutRunner) -> AsyncIterator[None]:
        yield  # around each runner.run(): where a remote executor connects to its cluster

    async def run_workflow(
        self, runner: RolloutRunner, workflow_task: WorkflowTask, tuner: ModelTuner
    ) -> WorkflowOutput:
        started = time.perf_counter()
        output = await runner.workflow.run(workflow_task, tuner)
        output.metrics["workflow_wall_s"] = time.perf_counter() - started
        return output


@hookimpl
def register_executors(register: Register) -> None:
    register("timed", TimedExecutor, summary="In this process, each workflow's wall time in its metrics.")
