"""Agent frameworks through astuner's gateway, each in a real rollout with a scripted model.

LangChain, the OpenAI Agents SDK, LiteLLM and AgentScope 2.x live in their
own environment (`bash .ci/engines.sh agents` builds `.venv-agents`):
AgentScope 2.x and the development environment's 1.x are the same package.
Each test module skips itself where its framework is not installed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest

from astuner import Task
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.trajectory import Trajectory
from astuner.default_plugins.exact_judge import ExactJudge, ExactJudgeSettings
from astuner.rollout.engine import SamplingParams
from astuner.rollout.gateway import Gateway
from astuner.rollout.runner import RolloutRunner, RunnerSettings
from astuner.rollout.workflow import adapt_workflow
from astuner.testing import broken_tool_calls as script
from astuner.testing.engines import ScriptedEngine

# Without it LiteLLM fetches its model price list from GitHub when it is imported.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# LiteLLM's own TypedDicts trip a pydantic warning when it is imported: not ours to fix.
LITELLM_NOISE = "ignore:Items? .* on TypedDict class .* (is|are) using the `ReadOnly` qualifier:UserWarning"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", LITELLM_NOISE)


TASK = Task(task_id="multiply", main_query=script.QUESTION, metadata={"answer": script.ANSWER})


@pytest.fixture
def run_rollout(qwen25: ChatTokenizer) -> Callable[..., Trajectory]:
    """`run_rollout(workflow, respond=script.respond, task=TASK, ...)`: one rollout behind a live gateway."""

    def run(
        workflow: Any,
        respond: Callable[[str], str] = script.respond,
        task: Task = TASK,
        settings: RunnerSettings | None = None,
        delay: float = 0.0,
    ) -> Trajectory:
        async def main() -> Trajectory:
            async with Gateway() as gateway:
                runner = RolloutRunner(
                    workflow=adapt_workflow(workflow, "test workflow"),
                    judge=ExactJudge(ExactJudgeSettings()),
                    engine=ScriptedEngine(qwen25, respond, delay=delay),
                    tokenizer=qwen25,
                    settings=settings,
                    gateway=gateway,
                )
                (trajectory,) = await runner.run([task], SamplingParams(max_tokens=128), progress=False)
                return trajectory

        return asyncio.run(main())

    return run
