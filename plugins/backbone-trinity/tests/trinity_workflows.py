"""Workflows for the Trinity adapter tests: a tool-using one (tool call, tool result, answer; the answer
at its own temperature in `cooler_answer`), and a two-agent game whose judge scores each agent."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from astuner import Workflow
from astuner.core.task import JudgeOutput, Task, WorkflowOutput

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


COOLER = 0.3


async def calculator_agent(task: dict[str, Any], model: Any, auxiliary_models: Any = None) -> WorkflowOutput:
    return await _calculator(task, model)


async def cooler_answer(task: dict[str, Any], model: Any, auxiliary_models: Any = None) -> WorkflowOutput:
    """`calculator_agent` with the answer sampled at temperature `COOLER` (a per-call override)."""
    return await _calculator(task, model, temperature=COOLER)


async def _calculator(task: dict[str, Any], model: Any, **answer_sampling: Any) -> WorkflowOutput:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task["main_query"]}]
    first = await model.chat(messages, [CALCULATOR])
    if not first.tool_calls:
        return WorkflowOutput(response=first.content, metadata={"final_answer": first.content})
    call = first.tool_calls[0]
    messages += [
        {"role": "assistant", "content": first.content, "tool_calls": [call.to_openai()]},
        {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": "42"},
    ]
    second = await model.chat(messages, [CALCULATOR], **answer_sampling)
    return WorkflowOutput(response=second.content, metadata={"final_answer": second.content})


class SeerGame(Workflow):
    """The wolf moves, then the seer, each on a prompt of its own; the seer alone trains (the
    workflow's trainable_targets) unless rollout.trainable_targets names others."""

    trainable_targets: list[str] = Field(default_factory=lambda: ["seer"])

    async def execute(self, workflow_task: Any, model_tuner: Any) -> WorkflowOutput:
        for role in ("wolf", "seer"):
            await model_tuner.chat([{"role": "user", "content": f"{role}, your move?"}], agent_name=role)
        return WorkflowOutput(response="done", metadata={"rewards": workflow_task.task.metadata["rewards"]})


class ScoresPerAgent:
    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        return JudgeOutput(reward=output.metadata["rewards"])
