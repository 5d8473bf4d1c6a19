"""Workflows for the agent-loop tests: two turns of one agent (the model answers, sees a tool result,
answers again; the second reply at its own temperature in `cooler_second_turn`), and two agents a judge
scores one by one."""

from __future__ import annotations

from typing import Any

from astuner.core.task import JudgeOutput, Task, WorkflowOutput

COOLER = 0.3


async def two_turns(task: dict[str, Any], model: Any, auxiliary_models: Any = None) -> WorkflowOutput:
    return await _two_turns(task, model)


async def cooler_second_turn(
    task: dict[str, Any], model: Any, auxiliary_models: Any = None
) -> WorkflowOutput:
    """`two_turns` with the second reply sampled at temperature `COOLER` (a per-call override)."""
    return await _two_turns(task, model, temperature=COOLER)


async def _two_turns(task: dict[str, Any], model: Any, **second_sampling: Any) -> WorkflowOutput:
    messages = [{"role": "user", "content": task["main_query"]}]
    first = await model.chat(messages)
    messages += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "The calculator says 42. Your final answer?"},
    ]
    second = await model.chat(messages, **second_sampling)
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
