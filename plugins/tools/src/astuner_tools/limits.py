"""What one run of model-written code may use: time, memory, processes, disk, output.

The numbers live here, in one frozen value, so a tool built with
`python_code_tool(...)` carries its limits and every run applies them the
same way. They become rlimits inside the sandbox (see `_launcher.py` for why
there rather than in a `preexec_fn`), tmpfs sizes, and the clip of what
comes back to the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Limits for one run; every size in MiB, every time in seconds."""

    max_timeout: float = 300.0
    """Wall-clock cap. The model's `timeout` argument (AgentScope's, default 300) is cut to this."""
    memory_mb: int = 1024
    """RLIMIT_AS of each process (address space, so a little above what it really uses); 0: none."""
    max_processes: int = 64
    """RLIMIT_NPROC: processes and threads the code may run at once (counted per sandbox, see docs)."""
    file_mb: int = 16
    """RLIMIT_FSIZE: the largest file the code may write, its printed output included."""
    disk_mb: int = 64
    """Size of the working directory and of /tmp, each a tmpfs in the sandbox (a plain folder without)."""
    open_files: int = 1024
    """RLIMIT_NOFILE."""
    output_chars: int = 4000
    """Characters of stdout and of stderr returned (each); the rest is cut with a note."""

    def effective_timeout(self, requested: object) -> float:
        """The model's `timeout`, if it is a positive number, cut to `max_timeout`."""
        try:
            value = float(requested)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return self.max_timeout
        if not value > 0 or math.isinf(value):
            return self.max_timeout
        return min(value, self.max_timeout)

    def rlimits(self, timeout: float) -> dict[str, int | None]:
        """The values `_launcher.py` sets, by name; None leaves that one as it is."""
        return {
            "cpu_s": math.ceil(timeout) + 1,  # CPU seconds per process: the wall clock stops the rest
            "as_bytes": self.memory_mb << 20 if self.memory_mb > 0 else None,
            "fsize_bytes": self.file_mb << 20 if self.file_mb > 0 else None,
            "nofile": self.open_files if self.open_files > 0 else None,
            "nproc": self.max_processes if self.max_processes > 0 else None,
        }
