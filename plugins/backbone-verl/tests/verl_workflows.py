"""Workflows for the agent-loop tests: two turns of one agent (the model answers, sees a tool result,
answers again), and two agents a judge scores one by one."""

from __future__ import annotations

from typing import Any

from astuner.core.task import JudgeOutput, Task, WorkflowOutput


async def two_turns(task: dict[str, Any], model: Any, auxiliary_models: Any = None) -> WorkflowOutput:
    messages = [{"role": "user", "content": task["main_query"]}]
    first = await model.chat(messages)
    messages += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "The calculator says 42. Your final answer?"},
    ]
    second = await model.chat(messages)
    return WorkflowOutput(response=second.content, metadata={"final_answer": second.content})


async def village(task: dict[str, Any], model: Any, auxiliary_models: Any = None) -> WorkflowOutput:
    """Two agents, each speaking once on a prompt of its own: one sample per agent."""
    for role in ("wolf", "seer"):
        await model.for_agent(role).chat([{"role": "user", "content": f"You are the {role}."}])
    return WorkflowOutput(response="done")


class AgentRewards:
    """A judge that scores each agent on its own: the task's `rewards` by agent name."""

    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        return JudgeOutput(reward=task.metadata["rewards"])
