"""The OpenAI Agents SDK (`Agent` + `Runner` on Chat Completions) keeps running after a broken tool call."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool

from astuner import ModelTuner, WorkflowOutput
from astuner.testing import broken_tool_calls as script

# The SDK would otherwise upload a trace of every run to OpenAI.
RUN_CONFIG = RunConfig(tracing_disabled=True)


@function_tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


async def agents_workflow(task: dict, model: ModelTuner) -> WorkflowOutput:
    agent = Agent(
        name="multiplier",
        instructions=script.SYSTEM_PROMPT,
        tools=[multiply],
        model=OpenAIChatCompletionsModel(model="policy", openai_client=model.openai_client()),
    )
    first = await Runner.run(agent, task["question"], run_config=RUN_CONFIG)
    follow_up = [*first.to_input_list(), {"role": "user", "content": script.FOLLOW_UP}]
    second = await Runner.run(agent, follow_up, run_config=RUN_CONFIG)
    return WorkflowOutput(response=second.final_output)


def test_openai_agents_sdk_survives_a_broken_tool_call(run_rollout) -> None:
    script.check_rollout(run_rollout(agents_workflow))
