"""The order desk: three roles on the plain OpenAI SDK, one learner each.

Each role talks to its own handle, `model_tuner.for_agent(role).openai_client()`,
so its calls are tagged with its name: with `agents.<role>.lora` each role
generates with (and trains) an adapter of its own. A role hears only what the
role before it handed over (its last number), never the others' chats; a role
whose input never came (the one before wrote no number) does not work.

The output's metadata holds the order and, per role that worked, what it was
asked, what it answered, the number it handed on and how many tool calls ran:
the judge (judge.py) scores each role from that.
"""

from __future__ import annotations

import json
from typing import Any

from desk import ROLES, Role, dollars, last_integer

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

MAX_TURNS = 2
"""Model calls per role: a tool call, then the answer (a role without a tool answers at once)."""

MODEL = "policy"


def run_tool(role: Role, arguments: str) -> str:
    """One tool call's result as the tool message's content; a bad call gets the error as its result."""
    try:
        assert role.tool is not None
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
            content = (
                run_tool(role, call["function"]["arguments"])
                if call["function"]["name"] == role.tool.__name__
                else str({"error": f"Tool {call['function']['name']} not found."})
            )
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": call["function"]["name"],
                    "content": content,
                }
            )
            tool_calls += 1
    return {
        "role": name,
        "question": question,
        "answer": text,
        "number": last_integer(text),
        "tool_calls": tool_calls,
    }


def questions(boxes: int, price: int, shipping: int) -> dict[str, Any]:
    """Each role's question, made from the number the role before handed over."""
    return {
        "pricer": lambda _: f"Price {boxes} boxes at {price} cents each.",
        "cashier": lambda cost: (
            f"The boxes cost {cost} cents and shipping costs {shipping} cents. What is the total?"
        ),
        "clerk": lambda total: f"The total is {total} cents. Write the receipt line.",
    }


async def serve(model_tuner: ModelTuner, boxes: int, price: int, shipping: int) -> list[dict[str, Any]]:
    """The roles work the order in turn; the chain stops at a role that hands on no number."""
    handed: int | None = None
    steps: list[dict[str, Any]] = []
    for name, ask in questions(boxes, price, shipping).items():
        step = await work(model_tuner, name, ask(handed))
        step["given"] = handed
        steps.append(step)
        handed = step["number"]
        if handed is None:
            break
    return steps


class OrderDeskWorkflow(Workflow):
    name: str = "order_desk"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        items = workflow_task.task.metadata
        steps = await serve(model_tuner, items["boxes"], items["price"], items["shipping"])
        receipt = steps[-1]["answer"] if steps[-1]["role"] == "clerk" else ""
        total = items["boxes"] * items["price"] + items["shipping"]
        return WorkflowOutput(
            response=receipt,
            metadata={**items, "steps": steps, "receipt": receipt, "expected": dollars(total)},
        )
