"""LiteLLM (`litellm.acompletion` against the gateway) keeps running after a broken tool call."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("litellm")

import litellm

from astuner import ModelTuner, WorkflowOutput
from astuner.testing import broken_tool_calls as script

MAX_TURNS = 4


def multiply(a: int, b: int) -> int:
    return a * b


TOOLS: dict[str, Callable[..., Any]] = {"multiply": multiply}


async def answer(model: ModelTuner, messages: list[dict[str, Any]]) -> str:
    """A tool loop on `litellm.acompletion`: run every tool call of a reply until a reply calls none."""
    for _ in range(MAX_TURNS):
        response = await litellm.acompletion(
            model="openai/policy",
            api_base=model.openai_base_url,
            api_key="astuner",
            messages=messages,
            tools=[script.MULTIPLY_TOOL],
        )
        message = response.choices[0].message
        if not message.tool_calls:
            messages.append({"role": "assistant", "content": message.content})
            return message.content or ""
        calls = [call.model_dump() for call in message.tool_calls]
        messages.append({"role": "assistant", "content": message.content, "tool_calls": calls})
        for call in calls:
            result = TOOLS[call["function"]["name"]](**json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(result)})
    raise AssertionError(f"no final answer in {MAX_TURNS} turns")


async def litellm_workflow(task: dict, model: ModelTuner) -> WorkflowOutput:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": script.SYSTEM_PROMPT},
        {"role": "user", "content": task["question"]},
    ]
    await answer(model, messages)
    messages.append({"role": "user", "content": script.FOLLOW_UP})
    return WorkflowOutput(response=await answer(model, messages))


def test_litellm_survives_a_broken_tool_call(run_rollout) -> None:
    script.check_rollout(run_rollout(litellm_workflow))
