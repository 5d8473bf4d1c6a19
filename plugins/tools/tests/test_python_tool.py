"""`astuner_tools.execute_python_code` against AgentScope's own: same call, same schema, same reply text."""

from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any

import pytest

agentscope_tool = pytest.importorskip("agentscope.tool")

from astuner_tools import execute_python_code, python_code_tool  # noqa: E402

from astuner.rollout.unconfined_tool import is_unconfined_python_tool  # noqa: E402


def reply_text(tool: Any, code: str, **kwargs: Any) -> str:
    response = asyncio.run(tool(code, **kwargs))
    assert isinstance(response, agentscope_tool.ToolResponse)
    (block,) = response.content
    assert block["type"] == "text"
    return block["text"]


def schema(tool: Any) -> dict:
    toolkit = agentscope_tool.Toolkit()
    toolkit.register_tool_function(tool)
    (found,) = toolkit.get_json_schemas()
    return found["function"]


def test_same_signature_and_parameters_as_agentscope() -> None:
    theirs = inspect.signature(agentscope_tool.execute_python_code)
    ours = inspect.signature(execute_python_code)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()
    ]
    assert schema(execute_python_code)["name"] == "execute_python_code"
    parameters = schema(agentscope_tool.execute_python_code)["parameters"]
    assert schema(execute_python_code)["parameters"] == parameters
    # the description differs (it tells the model about the sandbox), which is how astuner tells them apart
    assert not is_unconfined_python_tool({"type": "function", "function": schema(execute_python_code)})
    assert is_unconfined_python_tool(
        {"type": "function", "function": schema(agentscope_tool.execute_python_code)}
    )


@pytest.mark.parametrize(
    "code",
    [
        "print(sum(range(10)))",
        "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)",
        "print('é ✓')",
        "1/0",
        "x = (",
    ],
)
def test_replies_as_agentscope_does(code: str) -> None:
    theirs = reply_text(agentscope_tool.execute_python_code, code)
    ours = reply_text(execute_python_code, code)
    # only the name of the temporary file differs
    path = re.compile(r'File "[^"]+\.py"')
    assert path.sub('File "<code>"', ours) == path.sub('File "<code>"', theirs)


def test_the_models_timeout_is_cut_to_the_tools_ceiling() -> None:
    tool = python_code_tool(max_timeout=0.5)
    text = reply_text(tool, "while True: pass", timeout=300)
    # AgentScope's text for a timeout, with the time actually allowed
    assert text == (
        "<returncode>-1</returncode><stdout></stdout>"
        "<stderr>TimeoutError: The code execution exceeded the timeout of 0.5 seconds.</stderr>"
    )


def test_output_is_clipped() -> None:
    text = reply_text(python_code_tool(output_chars=100), "print('x' * 100_000)")
    assert "x" * 100 in text and "x" * 101 not in text
    assert "(output cut at 100 of 100001 bytes)" in text


def test_extra_arguments_are_ignored_as_agentscope_does() -> None:
    assert reply_text(execute_python_code, "print(1)", unknown="value") == (
        "<returncode>0</returncode><stdout>1\n</stdout><stderr></stderr>"
    )
