"""Whether a run folder's run is running, finished, failed (and why) or killed.

`status.json` is written when the run starts, with the process that runs it,
and rewritten when it ends. A process killed outright (SIGKILL, a reboot, an
out-of-memory kill) cannot write its end: its folder says `running` while
that process is gone, and reads as `killed`.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

STATUS_FILE = "status.json"

State = Literal["running", "finished", "failed", "killed", "unknown"]


@dataclass(frozen=True)
class RunStatus:
    """A run's state; `reason` says why it failed or was killed."""

    state: State
    reason: str = ""
    pid: int | None = None
    host: str = ""
    process_start: str = ""
    started: str = ""
    ended: str = ""

    def __str__(self) -> str:
        return f"{self.state}: {self.reason}" if self.reason else self.state


def mark_running(folder: Path) -> RunStatus:
    """Record that this process runs the run in `folder`, from now."""
    status = RunStatus(
        "running",
        pid=os.getpid(),
        host=socket.gethostname(),
        process_start=_process_start(os.getpid()),
        started=_now(),
    )
    _write(folder, status)
    return status


def mark_ended(folder: Path, state: State, reason: str = "") -> RunStatus:
    """Record how the run in `folder` ended (`finished`, `failed` or `killed`)."""
    before = read_status(folder)
    status = RunStatus(
        state,
        reason=" ".join(reason.split()),
        pid=before.pid,
        host=before.host,
        process_start=before.process_start,
        started=before.started,
        ended=_now(),
    )
    _write(folder, status)
    return status


def outcome(exc: BaseException | None) -> tuple[State, str]:
    """How a run that raised `exc` (None: returned) ended, and why, in one line."""
    if exc is None:
        return "finished", ""
    if isinstance(exc, KeyboardInterrupt):
        return "killed", "interrupted (Ctrl-C)"
    if isinstance(exc, SystemExit):
        return "killed", f"stopped (exit {exc.code})" if exc.code else "stopped"
    from astuner.errors import AstunerError

    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return "failed", (first if isinstance(exc, AstunerError) else f"{type(exc).__name__}: {first}")[:300]


@contextmanager
def tracking(folder: Path) -> Iterator[None]:
    """`running` in `folder` while the block runs, then how it ended (`outcome`)."""
    mark_running(folder)
    try:
        yield
    except BaseException as exc:
        mark_ended(folder, *outcome(exc))
        raise
    mark_ended(folder, "finished")


def read_status(folder: Path) -> RunStatus:
    """The run's status; `running` whose process is gone reads as `killed`, no file as `unknown`."""
    try:
        data = json.loads((folder / STATUS_FILE).read_text(encoding="utf-8"))
        status = RunStatus(**data)
    except (OSError, ValueError, TypeError):
        return RunStatus("unknown")
    if status.state == "running" and not _still_running(status):
        return RunStatus(
            "killed",
            reason="its process ended without saying so (killed by a signal, out of memory, or a reboot)",
            pid=status.pid,
            host=status.host,
            process_start=status.process_start,
            started=status.started,
        )
    return status


def _still_running(status: RunStatus) -> bool:
    if status.pid is None or status.host != socket.gethostname():
        return True  # another machine's process: nothing here can tell
    try:
        os.kill(status.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # The PID may have been reused by a later process: its start time tells them apart.
    start = _process_start(status.pid)
    return not (start and status.process_start and start != status.process_start)


def _process_start(pid: int) -> str:
    """When process `pid` started, in clock ticks since boot ('' where /proc is not there)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _write(folder: Path, status: RunStatus) -> None:
    temporary = folder / f".{STATUS_FILE}.tmp"
    temporary.write_text(json.dumps(asdict(status), indent=1), encoding="utf-8")
    temporary.replace(folder / STATUS_FILE)  # never half a file, even when killed mid-write


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")
