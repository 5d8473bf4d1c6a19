"""Agent tools that run model-written code, confined: `from astuner_tools import execute_python_code`.

`execute_python_code` is a drop-in for AgentScope 1.x's
`agentscope.tool.execute_python_code`: same parameters (`code`,
`timeout=300`, `**kwargs`), same `ToolResponse` and text
(`<returncode>N</returncode><stdout>..</stdout><stderr>..</stderr>`; -1 and
AgentScope's TimeoutError line when time runs out), so

    toolkit.register_tool_function(execute_python_code)

works as before. AgentScope's own runs the code with the agent's user,
environment, files and network, for as long as the model asks; in RL
training the code comes from a model being optimised against a reward, so
it is untrusted (astuner logs a warning once when a training run's agent
offers AgentScope's own). Here each call runs:

- as a fresh `python main.py` in a private temporary folder, removed
  afterwards, with a minimal environment (no proxies, tokens, PYTHONPATH
  or CUDA settings) and stdin closed;
- under a wall-clock limit (the model's `timeout`, cut to `max_timeout`);
  when it ends or time is up, every process the code started is killed,
  setsid() or not;
- with rlimits: address space (`memory_mb`), file size (`file_mb`), CPU
  time, open files, no core dumps, and processes and threads
  (`max_processes`, counted per sandbox in a user namespace of its own);
- in the best sandbox available: bubblewrap (`bwrap`), else util-linux
  `unshare`, else none, in which case one warning per process names what
  is missing. Which one works is found out on the first call, once.

In a sandbox (bwrap or unshare, Linux) the code sees:

- the machine's filesystem read-only, except its working directory and a
  fresh /tmp and /dev/shm (tmpfs of `disk_mb` each, gone afterwards);
- empty read-only folders in place of the home folder, the project (the
  git work tree around the working directory), /run (service sockets:
  docker.sock, D-Bus, ssh-agent) and /var/tmp, plus any `hidden_paths`;
  the interpreter's own folders are shown again, read-only, inside them;
- a minimal /dev, and a /proc of its own PID namespace (only its own
  processes);
- no network: an empty network namespace, so not the host's loopback
  services either (`allow_network=True` shares the host's);
- when astuner runs as root: the code runs as `nobody`, so root-only files
  stay closed, if `nobody` can read the interpreter; else as root (still
  read-only, with capabilities only in its own user namespace) and a
  warning says so.

Without a sandbox (no bwrap, user namespaces forbidden as in many
containers, or macOS) the filesystem is NOT confined: the code reads and
writes whatever its user can. The limits, the time limit and the clean-up
still apply (the launcher is child subreaper, and a cgroup is used where
one can be made); the network is cut by a network namespace where the
kernel allows one, else only Python's socket module refuses to connect,
which code can get around.

`python_code_tool(max_timeout=10, memory_mb=2048, ...)` builds the tool with
other limits; `run_python(code, ...)` is the same run without AgentScope.
docs/security.md says exactly what is and is not isolated with bwrap, with
unshare and with neither, on Linux and macOS.

This is a guard against mistakes, runaway loops and casual escapes, and
much more than AgentScope's tool; it is not a VM (the code still talks to
the host's kernel). For code written to attack the machine, run the
rollouts in a container or VM as well.
"""

from astuner_tools.backends import Sandbox
from astuner_tools.limits import Limits
from astuner_tools.python import execute_python_code, python_code_tool
from astuner_tools.run import RunResult, run_python, run_python_sync

__all__ = [
    "Limits",
    "RunResult",
    "Sandbox",
    "execute_python_code",
    "python_code_tool",
    "run_python",
    "run_python_sync",
]
