"""`execute_python_code`: the math agent's tool, running model-written Python in a confined subprocess.

AgentScope ships a tool of the same name that runs the code with the
agent's own environment, network access, and a time limit the model picks
(up to 300 s). Code written by a model under training is untrusted, so this
one runs it in a fresh `python -I` process:

- in an empty temporary folder, with a minimal environment (no proxies, no
  PYTHONPATH, no user site-packages), and stdin closed;
- under a wall-clock limit fixed by the workflow, not the model (default
  10 s), after which the process group it started is killed; its CPU time
  and address space are capped too (`RLIMIT_CPU`, `RLIMIT_AS`);
- without network: in a new network namespace with no interfaces (via
  `unshare`, as root or with unprivileged user namespaces), and with
  Python's sockets refusing to connect or resolve names either way.

The model sees one parameter, `code`. `python_tool(timeout_s=..., allow_network=...,
memory_mb=...)` builds the tool with other limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from agentscope.message import TextBlock
from agentscope.tool import ToolResponse

MAX_OUTPUT_CHARS = 4000

# Runs first in the child, before the model's code: limits, then the network cut, then the script.
_LAUNCHER = r"""
import ctypes, os, resource, runpy, socket, sys

memory_mb, cpu_s, network, script = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))  # output and files the code writes
if memory_mb > 0:
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
if not network:
    CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWNET) != 0 and libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        # keep our own uid and gid inside the new user namespace, so files read as before
        maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
        for name, text in maps:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)

    def _refuse(*args, **kwargs):
        raise OSError("network access is disabled in execute_python_code")

    for name in ("connect", "connect_ex", "sendto"):
        setattr(socket.socket, name, _refuse)
    socket.getaddrinfo = socket.gethostbyname = socket.create_connection = _refuse
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
"""


def _read_clipped(path: Path) -> str:
    """The file's text, cut to MAX_OUTPUT_CHARS (only that much is read)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        text = f.read(MAX_OUTPUT_CHARS * 4).decode("utf-8", "replace")
    if len(text) <= MAX_OUTPUT_CHARS and size <= MAX_OUTPUT_CHARS * 4:
        return text
    return text[:MAX_OUTPUT_CHARS] + f"\n... (output cut at {MAX_OUTPUT_CHARS} of {size} bytes)"


async def run_python(
    code: str, *, timeout_s: float = 10.0, allow_network: bool = False, memory_mb: int = 1024
) -> tuple[int, str, str]:
    """Run `code` confined as described above; `(returncode, stdout, stderr)`, returncode -1 on timeout."""
    with tempfile.TemporaryDirectory(prefix="math-agent-python-") as folder:
        work, out_path, err_path = Path(folder) / "work", Path(folder) / "stdout", Path(folder) / "stderr"
        work.mkdir()
        script = work / "main.py"
        script.write_text(code, encoding="utf-8")
        env = {"PATH": os.defpath, "HOME": str(work), "PYTHONUTF8": "1", "PYTHONIOENCODING": "utf-8"}
        cpu_s = max(1, int(timeout_s) + 1)
        args = [str(memory_mb), str(cpu_s), "1" if allow_network else "0", str(script)]
        # Output goes to files, not pipes: a process the code leaves behind cannot hold them open.
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-u",
                "-c",
                _LAUNCHER,
                *args,
                cwd=work,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            timed_out = False
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except asyncio.TimeoutError:
                timed_out = True
            # The child leads its own session: this stops it, or whatever it left running.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        stdout, stderr = _read_clipped(out_path), _read_clipped(err_path)
    if timed_out:
        stderr += f"\nTimeoutError: the code ran longer than {timeout_s:g} s and was stopped."
        return -1, stdout, stderr
    return (proc.returncode if proc.returncode is not None else -1), stdout, stderr


def python_tool(
    timeout_s: float = 10.0, allow_network: bool = False, memory_mb: int = 1024
) -> Callable[[str], Awaitable[ToolResponse]]:
    """An `execute_python_code` tool with these limits (the model only ever passes `code`)."""

    async def execute_python_code(code: str) -> ToolResponse:
        """Execute Python code and return its exit code, standard output and standard error.

        Only what the code prints comes back, so `print` the values you need.

        Args:
            code (`str`):
                The Python code to run.
        """
        returncode, out, err = await run_python(
            code, timeout_s=timeout_s, allow_network=allow_network, memory_mb=memory_mb
        )
        text = f"<returncode>{returncode}</returncode><stdout>{out}</stdout><stderr>{err}</stderr>"
        return ToolResponse(content=[TextBlock(type="text", text=text)])

    return execute_python_code


execute_python_code = python_tool()
