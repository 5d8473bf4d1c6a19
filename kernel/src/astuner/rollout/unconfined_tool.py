"""Noticing AgentScope's own, unconfined `execute_python_code` in a training run.

A workflow that registers `agentscope.tool.execute_python_code` runs every
piece of code the model writes with the trainer's user, files, environment
and network. astuner only sees the tool list the agent sends with each
model call (JSON schemas), so it recognises that tool by its name and its
description, which is AgentScope's docstring (the confined drop-in of the
`astuner-tools` package describes itself differently). It only warns, once
per process: the workflow is the user's to write. This lives in the kernel,
not in `astuner-tools`, because it is about AgentScope's tool: it must speak
up exactly when that package is not in use, installed or not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from astuner.logs import warn_once

NAME = "execute_python_code"
WARNING = (
    "the agent uses AgentScope's execute_python_code: the model's code runs unconfined, with this "
    "process's user, files, environment variables and network, for as long as the model asks "
    "(300 s by default). Use `from astuner_tools import execute_python_code` instead (same tool, "
    "confined; `pip install astuner-tools`, in this repository `pip install -e ./plugins/tools`). "
    "See docs/security.md."
)


@cache
def agentscope_description() -> str | None:
    """The description AgentScope's Toolkit gives its own `execute_python_code` (None without AgentScope)."""
    try:
        from agentscope.tool import Toolkit
        from agentscope.tool import execute_python_code as unconfined
    except Exception:
        return None
    toolkit = Toolkit()
    toolkit.register_tool_function(unconfined)
    (schema,) = toolkit.get_json_schemas()
    return schema["function"]["description"]


def is_unconfined_python_tool(tool: Any) -> bool:
    """Whether an OpenAI-style tool schema is AgentScope's own `execute_python_code`."""
    function = tool.get("function") if isinstance(tool, Mapping) else None
    if not isinstance(function, Mapping) or function.get("name") != NAME:
        return False
    description = agentscope_description()
    return description is not None and function.get("description", "").strip() == description.strip()


def warn_if_unconfined_python_tool(tools: Sequence[Any] | None) -> None:
    """Warn once per process if `tools` holds AgentScope's unconfined Python tool. Never raises."""
    if not tools:
        return
    try:
        found = any(is_unconfined_python_tool(tool) for tool in tools)
    except Exception:
        return
    if found:
        warn_once("unconfined python tool", WARNING)
