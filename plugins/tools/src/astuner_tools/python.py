"""`execute_python_code`: AgentScope's tool of that name, with the model's code confined.

Same call (`code`, `timeout=300`, `**kwargs`), same `ToolResponse`, same text
(`<returncode>..</returncode><stdout>..</stdout><stderr>..</stderr>`, -1 and
AgentScope's TimeoutError line when the time runs out), so
`toolkit.register_tool_function(execute_python_code)` is a one-line swap.
What differs is where the code runs (see `astuner_tools`), that `timeout`
is cut to the tool's `max_timeout`, and that each output is clipped to
`output_chars`.

The tool's description differs from AgentScope's on purpose: it tells the
model what it may not do, and it lets astuner tell the two apart in a
training run's tool list (`astuner.rollout.unconfined_tool` in the kernel).
"""

import os
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from astuner_tools.backends import Sandbox
from astuner_tools.limits import Limits
from astuner_tools.run import RunResult, run_python

if TYPE_CHECKING:  # AgentScope is imported when the tool runs, not when astuner_tools is imported
    from agentscope.tool import ToolResponse

DESCRIPTION = """Execute the given python code in a sandbox and capture the return
code, standard output and error. Note you must `print` the output to get
the result. The code runs as a fresh process in an empty temporary folder
(deleted afterwards) where it may write files, {network}, and it is
stopped after {max_timeout:g} seconds at most.

Args:
    code (`str`):
        The Python code to be executed.
    timeout (`float`, defaults to `300`):
        The maximum time (in seconds) allowed for the code to run.

Returns:
    `ToolResponse`:
        The response containing the return code, standard output, and
        standard error of the executed code.
"""

TIMEOUT_LINE = "TimeoutError: The code execution exceeded the timeout of {timeout} seconds."


def response_text(result: RunResult, timeout: float) -> str:
    """AgentScope's text for a run: its timeout line is appended to stderr the same way."""
    stderr = result.stderr
    if result.timed_out:
        line = TIMEOUT_LINE.format(timeout=timeout)
        stderr = f"{stderr}\n{line}" if stderr else line
    return (
        f"<returncode>{result.returncode}</returncode>"
        f"<stdout>{result.stdout}</stdout>"
        f"<stderr>{stderr}</stderr>"
    )


def python_code_tool(
    *,
    max_timeout: float = 300.0,
    memory_mb: int = 1024,
    max_processes: int = 64,
    file_mb: int = 16,
    disk_mb: int = 64,
    output_chars: int = 4000,
    allow_network: bool = False,
    sandbox: Sandbox | Literal["auto"] = "auto",
    hidden_paths: Iterable[str | os.PathLike[str]] = (),
) -> Callable[..., Awaitable["ToolResponse"]]:
    """An `execute_python_code` tool with these limits (see `Limits` for what each one is).

    The model still sees AgentScope's two parameters, `code` and `timeout`;
    a `timeout` above `max_timeout` (or not a positive number) becomes `max_timeout`.
    """
    limits = Limits(
        max_timeout=max_timeout,
        memory_mb=memory_mb,
        max_processes=max_processes,
        file_mb=file_mb,
        disk_mb=disk_mb,
        output_chars=output_chars,
    )
    hidden = tuple(hidden_paths)

    async def execute_python_code(code: str, timeout: float = 300, **kwargs: Any) -> "ToolResponse":
        from agentscope.message import TextBlock
        from agentscope.tool import ToolResponse

        seconds = limits.effective_timeout(timeout)
        result = await run_python(
            code,
            timeout=seconds,
            limits=limits,
            allow_network=allow_network,
            sandbox=sandbox,
            hidden_paths=hidden,
        )
        shown = timeout if seconds == timeout else seconds  # AgentScope prints the number it was given
        return ToolResponse(content=[TextBlock(type="text", text=response_text(result, shown))])

    network = "with network access" if allow_network else "without network access"
    execute_python_code.__doc__ = DESCRIPTION.format(network=network, max_timeout=max_timeout)
    execute_python_code.limits = limits  # type: ignore[attr-defined]
    return execute_python_code


execute_python_code = python_code_tool()
