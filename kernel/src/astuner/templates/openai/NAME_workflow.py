"""The agent: a tool-calling loop written with the plain OpenAI SDK.

`model.openai_client()` is an `openai.AsyncOpenAI` pointed at astuner's local
gateway for this rollout: every request through it is recorded token for
token and trained, tools and streaming included. Any other OpenAI-compatible
client (LangChain, raw HTTP) works the same way with `model.openai_base_url`.

The agent must finish by calling `submit_answer`; a reply without that call
gets a reminder, up to `MAX_TURNS` model calls. What it submits goes to the
judge as `metadata["final_answer"]`.
"""

from __future__ import annotations

import json
from typing import Any

from astuner import ModelTuner, WorkflowOutput

MAX_TURNS = 3
SYSTEM_PROMPT = (
    "You solve arithmetic word problems. Think step by step, then call the "
    "submit_answer tool with the final number."
)
REMINDER = "Call the submit_answer tool with your final number."
SUBMIT_ANSWER = {
    "type": "function",
    "function": {
        "name": "submit_answer",
        "description": "Submit the final answer to the problem.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "number", "description": "The final number."}},
            "required": ["answer"],
        },
    },
}


def submitted(tool_calls: list[Any]) -> Any:
    """The `answer` argument of the first well-formed submit_answer call, else None."""
    for call in tool_calls:
        if call.function.name != "submit_answer":
            continue
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except json.JSONDecodeError:
            continue
        if isinstance(arguments, dict) and "answer" in arguments:
            return arguments["answer"]
    return None


async def run_agent(task: dict, model: ModelTuner, auxiliary_models: dict | None = None) -> WorkflowOutput:
    client = model.openai_client()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task["question"]},
    ]
    text = ""
    for _ in range(MAX_TURNS):
        completion = await client.chat.completions.create(
            model="policy", messages=messages, tools=[SUBMIT_ANSWER]
        )
        message = completion.choices[0].message
        text = message.content or ""
        answer = submitted(message.tool_calls or [])
        if answer is not None:
            return WorkflowOutput(response=text, metadata={"final_answer": answer})
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": REMINDER}]
    return WorkflowOutput(response=text, metadata={"final_answer": None})
