"""The order desk: three roles on the plain OpenAI SDK, one learner each.

Each role talks to its own handle, `model_tuner.for_agent(role).openai_client()`,
so its calls are tagged with its name: with `agents.<role>.lora` each role
generates with (and trains) an adapter of its own. A role hears only what the
role before it handed over, never the others' chats: the clerk reads the
customer's message and hands on the ticket's first two numbers (boxes, price
per box), the pricer the last number of its answer (the price of the boxes).
A role whose input never came (the one before wrote too few numbers) does not
work.

The output's metadata holds the order and, per role that worked, what it was
asked, what it answered, what it was given, what it handed on and how many
tool calls ran: the judge (judge.py) scores each role from that.
"""

from __future__ import annotations

import json
from typing import Any

from desk import ROLES, Role, integers

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

MAX_TURNS = 2
"""Model calls per role: a tool call, then the answer (a role without a tool answers at once)."""

MODEL = "policy"


def run_tool(role: Role, name: str, arguments: str) -> str:
    """One tool call's result as the tool message's content; a bad call gets the error as its result."""
    try:
        if role.tool is None or name != role.tool.__name__:
            raise ValueError(f"Tool {name} not found.")
        result = role.tool(**json.loads(arguments))
    except Exception as exc:  # the model's mistake is the tool's answer, never the rollout's end
        return str({"error": str(exc)})
    return str(result)


async def work(model_tuner: ModelTuner, name: str, question: str) -> dict[str, Any]:
    """Role `name` answers `question`, calling its tool when it asks to: what it said and did."""
    role = ROLES[name]
    client = model_tuner.for_agent(name).openai_client()
    messages: list[dict[str, Any]] = [{"role": "system", "content": role.system}, *role.demonstration()]
    messages.append({"role": "user", "content": question})
    tools = {"tools": role.tools} if role.tools else {}
    text, tool_calls = "", 0
    for turn in range(MAX_TURNS):
        completion = await client.chat.completions.create(model=MODEL, messages=messages, **tools)
        message = completion.choices[0].message
        text = message.content or ""
        if not message.tool_calls or role.tool is None or turn == MAX_TURNS - 1:
            break
        calls = [call.model_dump() for call in message.tool_calls]
        messages.append({"role": "assistant", "content": message.content, "tool_calls": calls})
        for call in calls:
            function = call["function"]
            content = run_tool(role, function["name"], function["arguments"])
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "name": function["name"], "content": content}
            )
            tool_calls += 1
    return {"role": name, "question": question, "answer": text, "tool_calls": tool_calls}


def handed_on(name: str, answer: str) -> Any:
    """What role `name` hands on from its `answer`: the clerk the ticket's first two numbers, the
    others their answer's last number; None when the answer has too few numbers."""
    numbers = integers(answer)
    if name == "clerk":
        return numbers[:2] if len(numbers) >= 2 else None
    return numbers[-1] if numbers else None


def question(name: str, given: Any, message: str, shipping: int) -> str:
    """Role `name`'s question, made from what it was given (the clerk: the customer's message)."""
    if name == "clerk":
        return message
    if name == "pricer":
        boxes, price = given
        return f"Price {boxes} boxes at {price} cents each."
    return f"The boxes cost {given} cents and shipping costs {shipping} cents. What is the total?"


async def serve(model_tuner: ModelTuner, message: str, shipping: int) -> list[dict[str, Any]]:
    """The roles work the order in turn; the chain stops at a role that hands on nothing."""
    given: Any = None
    steps: list[dict[str, Any]] = []
    for name in ROLES:
        step = await work(model_tuner, name, question(name, given, message, shipping))
        step["given"], step["handed"] = given, handed_on(name, step["answer"])
        steps.append(step)
        given = step["handed"]
        if given is None:
            break
    return steps


class OrderDeskWorkflow(Workflow):
    name: str = "order_desk"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        task = workflow_task.task
        items = task.metadata
        steps = await serve(model_tuner, task.main_query, items["shipping"])
        total = steps[-1]["handed"] if steps[-1]["role"] == "cashier" else None
        return WorkflowOutput(
            response=steps[-1]["answer"], metadata={**items, "steps": steps, "total": total}
        )
