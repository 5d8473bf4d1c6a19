"""The agent: a tool-calling loop on the plain OpenAI SDK.

astuner calls `run_agent` once per rollout with the task's row (`question`,
`answer`, `id`: the fields of the jsonl line) and `model`, the model being
trained. `model.openai_client()` is an `openai.AsyncOpenAI` pointed at
astuner's gateway for this rollout: every request through it is recorded
token for token and trained. Each reply's tool calls run here, their
results go back to the model, and the first reply without a call is the
answer that the judge reads.
"""

from __future__ import annotations

import json
from typing import Any

from tools import FUNCTIONS, TOOLS

from astuner import ModelTuner, WorkflowOutput

MAX_TURNS = 4
"""Model calls per rollout: find_owner, find_city, the answer, and one to spare."""

SYSTEM_PROMPT = (
    "You answer questions about pets and their owners. Find the pet's owner with find_owner, "
    "then the owner's city with find_city, then answer with the city."
)


def run_tool(name: str, arguments: str) -> str:
    """One call's result, or what went wrong, as the text the model reads next."""
    try:
        return FUNCTIONS[name](**json.loads(arguments))
    except Exception as exc:  # a bad call is the model's mistake to learn from, not the rollout's end
        return f"error: {type(exc).__name__}: {exc}"


async def run_agent(task: dict, model: ModelTuner, auxiliary_models: dict | None = None) -> WorkflowOutput:
    client = model.openai_client()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task["question"]},
    ]
    text, calls = "", 0
    for _ in range(MAX_TURNS):
        completion = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        message = completion.choices[0].message
        text = message.content or ""
        if not message.tool_calls:
            break
        tool_calls = [call.model_dump() for call in message.tool_calls]
        messages.append({"role": "assistant", "content": text, "tool_calls": tool_calls})
        for call in tool_calls:
            name = call["function"]["name"]
            result = run_tool(name, call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "name": name, "content": result})
            calls += 1
    return WorkflowOutput(response=text, metadata={"tool_calls": calls})
