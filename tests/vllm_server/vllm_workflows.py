"""Workflows for backbone `torch` runs on vLLM (imported by string from the test configs)."""

from __future__ import annotations

import asyncio
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


class AnswerTwiceOnNewWeights(AnswerOnce):
    """Asks, then, once the server serves the weights its step trains from (update step - 1), asks again
    in the same conversation. With `trainer_common.max_staleness` a batch starts a step or more early: its
    first calls are stale, its second ones fresh, sampled by weights synced while other calls ran."""

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        messages = [{"role": "user", "content": workflow_task.task.main_query}]
        first = await model_tuner.chat(messages)
        step = int(workflow_task.group_id.split("-")[0].removeprefix("step"))
        while model_tuner.engine.version < step - 1:
            await asyncio.sleep(0.05)
        messages += [
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": "So the answer is?"},
        ]
        call = await model_tuner.chat(messages)
        right = str(workflow_task.task.metadata["answer"]) in call.content
        return WorkflowOutput(reward=float(right), is_success=right, response=call.content)
