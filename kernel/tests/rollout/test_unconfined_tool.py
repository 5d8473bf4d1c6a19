"""A training run's agent that offers AgentScope's own `execute_python_code` gets one warning per process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from astuner.core.trajectory import LLMCall
from astuner.logs import get_logger
from astuner.rollout import unconfined_tool
from astuner.rollout.agentscope_model import agentscope_model_tuner_class

agentscope_tool = pytest.importorskip("agentscope.tool")


@pytest.fixture
def logs() -> Iterator[list[dict]]:
    """What is logged during the test (astuner.testing starts each test with nothing warned yet)."""
    get_logger()  # its first use configures structlog, which would drop the capture's processors
    with capture_logs() as captured:
        yield captured


def warnings(logs: list[dict]) -> list[str]:
    return [entry["event"] for entry in logs if entry["log_level"] == "warning"]


def schemas(function: Any) -> list[dict]:
    toolkit = agentscope_tool.Toolkit()
    toolkit.register_tool_function(function)
    return toolkit.get_json_schemas()


async def execute_python_code(code: str, timeout: float = 300, **kwargs: Any) -> Any:
    """Run Python code in the user's own sandbox.

    Args:
        code (`str`):
            The Python code to be executed.
        timeout (`float`, defaults to `300`):
            The maximum time (in seconds) allowed for the code to run.
    """


def test_agentscopes_own_tool_is_warned_about_once_with_the_confined_one_named(logs: list[dict]) -> None:
    model = object.__new__(agentscope_model_tuner_class())  # only __call__ is exercised

    async def chat(messages: list, tools: list | None) -> LLMCall:
        return LLMCall(content="ok")

    model.chat = chat  # type: ignore[method-assign]
    asyncio.run(model([{"role": "user", "content": "hi"}], tools=schemas(execute_python_code)))
    assert warnings(logs) == []  # same name, another tool: nothing to say
    unconfined = schemas(agentscope_tool.execute_python_code)
    for _ in range(3):
        asyncio.run(model([{"role": "user", "content": "hi"}], tools=unconfined))
    (warning,) = warnings(logs)
    assert "AgentScope's execute_python_code" in warning
    assert "from astuner_tools import execute_python_code" in warning and "astuner-tools" in warning


def test_entries_that_are_not_tool_schemas_are_passed_over(logs: list[dict]) -> None:
    odd: list[Any] = ["not a schema", {"function": None}, {"type": "function"}, None]
    unconfined_tool.warn_if_unconfined_python_tool(odd)
    assert warnings(logs) == []
    unconfined_tool.warn_if_unconfined_python_tool([*odd, *schemas(agentscope_tool.execute_python_code)])
    assert len(warnings(logs)) == 1
