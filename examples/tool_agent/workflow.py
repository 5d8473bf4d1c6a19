"""A multi-turn tool-use agent on the plain OpenAI SDK: multiply with a tool, then answer.

The task ("What is 412 times 37?", reader `arith` with `difficulty: product`)
is one a 135M model gets wrong by heart and right by calling `multiply`, so
its reward measures tool use. The loop is TRL's agent loop
(`GRPOTrainer(tools=[multiply])`, `max_tool_calling_iterations=MAX_TURNS - 1`)
written against `model_tuner.openai_client()`: every reply's tool calls run
in order, a failing call gets `str({"error": ...})` as its result as in TRL,
and a reply without tool calls is the final answer. bench/bench_agentic.py
imports `SYSTEM_PROMPT`, `TOOLS`, `MAX_TURNS`, `multiply` and `last_integer`
from here to build TRL's side, so both sides ask the same thing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

MAX_TURNS = 3
"""Model calls per rollout: up to two rounds of tool calls, then the answer."""

SYSTEM_PROMPT = (
    "You are a careful assistant. Multiply numbers with the multiply tool, "
    "then reply with the final answer as a number."
)

MODEL = "policy"
"""The model name sent to astuner's gateway (any name reaches the trained model)."""


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {value!r}")
    return a * b


# transformers.utils.get_json_schema(multiply), as TRL builds its tool list, less its "return"
# entry (not part of OpenAI's function schema).
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "Multiply two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "The first number."},
                    "b": {"type": "integer", "description": "The second number."},
                },
                "required": ["a", "b"],
            },
        },
    }
]

_FUNCTIONS = {"multiply": multiply}
_INTEGER = re.compile(r"-?\d+(?:,\d{3})*")


def last_integer(text: str) -> str:
    """The last integer written in `text` ("15,244" read as "15244"), or "" when there is none."""
    found = _INTEGER.findall(text)
    return found[-1].replace(",", "") if found else ""


def run_tool(name: str, arguments: str) -> str:
    """One tool call's result as the tool message's content; a failure is an error text, as in TRL."""
    try:
        if name not in _FUNCTIONS:
            raise ValueError(f"Tool {name} not found.")
        result = _FUNCTIONS[name](**json.loads(arguments))
    except Exception as exc:  # the model's mistake is the tool's answer, never the rollout's end
        return str({"error": str(exc)})
    return str(result)


async def solve(question: str, model_tuner: ModelTuner) -> WorkflowOutput:
    """Ask, run the reply's tool calls, ask again; at most MAX_TURNS model calls.

    `final_answer` is the last integer of the last reply; `tool_calls` counts the calls run.
    """
    client = model_tuner.openai_client()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    text, tool_calls = "", 0
    for turn in range(MAX_TURNS):
        completion = await client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        message = completion.choices[0].message
        text = message.content or ""
        if not message.tool_calls or turn == MAX_TURNS - 1:
            break  # the answer, or calls past the last round: TRL leaves those unrun too
        calls = [call.model_dump() for call in message.tool_calls]
        messages.append({"role": "assistant", "content": message.content, "tool_calls": calls})
        for call in calls:
            name = call["function"]["name"]
            content = run_tool(name, call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "name": name, "content": content})
            tool_calls += 1
    metadata = {"final_answer": last_integer(text), "tool_calls": tool_calls}
    return WorkflowOutput(response=text, metadata=metadata)


class ToolAgentWorkflow(Workflow):
    name: str = "tool_agent_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        return await solve(workflow_task.task.main_query, model_tuner)
