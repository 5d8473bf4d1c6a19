"""Workflows for backbone `torch` runs on vLLM (imported by string from the test configs)."""

from __future__ import annotations

import os
import signal

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask


class AnswerOnce(Workflow):
    """One call; reward 1 when the task's answer appears in the reply."""

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        answer = str(workflow_task.task.metadata["answer"])
        right = answer in call.content
        return WorkflowOutput(reward=float(right), is_success=right, response=call.content)


class KillsTheServerAtStep2(AnswerOnce):
    """As AnswerOnce, but the first rollout of step 2 kills the vLLM server first (SIGKILL, by PID)."""

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        if workflow_task.group_id.startswith("step2-") and workflow_task.repeat_index == 0:
            server = model_tuner.engine.engine.server
            if server.alive():
                os.kill(server.pid, signal.SIGKILL)
                server.process.wait()
        return await super().execute(workflow_task, model_tuner)
