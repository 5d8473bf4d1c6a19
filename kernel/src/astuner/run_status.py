"""Whether a run folder's run is running, finished, failed (and why) or killed.

`status.json` is written when the run starts, with the process that runs it
and the command that started it (`run`, `eval`, `sft`, a plugin's command),
and rewritten when it ends. A process killed outright (SIGKILL, a reboot, an
out-of-memory kill) cannot write its end: its folder says `running` while
that process is gone, and reads as `killed`.

On a full disk there is no room for the fresh copy that makes a rewrite
atomic; the end is then written over the file's own block, and where even
that fails it is said as a warning: the run's own error stays the one shown.
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import suppress
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from astuner.errors import AstunerError
from astuner.logs import get_logger

STATUS_FILE = "status.json"

State = Literal["running", "finished", "failed", "killed", "unknown"]


@dataclass(frozen=True)
class RunStatus:
    """A run's state; `reason` says why it failed or was killed, `command` which command ran it."""

    state: State
    reason: str = ""
    pid: int | None = None
    host: str = ""
    process_start: str = ""
    started: str = ""
    ended: str = ""
    command: str = ""

    def __str__(self) -> str:
        return f"{self.state}: {self.reason}" if self.reason else self.state


def mark_running(folder: Path, command: str = "") -> RunStatus:
    """Record that this process runs the run in `folder`, from now, for `command` (`astuner <command>`)."""
    status = RunStatus(
        "running",
        pid=os.getpid(),
        host=socket.gethostname(),
        process_start=_process_start(os.getpid()),
        started=_now(),
        command=command,
    )
    _write(folder, status)
    return status


def mark_ended(folder: Path, state: State, reason: str = "") -> RunStatus:
    """Record how the run in `folder` ended (`finished`, `failed` or `killed`).

    Raises `AstunerError`, naming the file, when it cannot be written.
    """
    status = _ended(folder, state, reason)
    _write(folder, status)
    return status


def end_run(folder: Path, exc: BaseException | None) -> RunStatus:
    """Record how the run that raised `exc` (None: returned) ended; never raises.

    A status that cannot be written (a full disk) is a warning naming the
    file: raising here would replace the run's own error, which says what
    went wrong first (often the same full disk, with the file it filled).
    """
    status = _ended(folder, *outcome(exc))
    try:
        _write(folder, status)
    except AstunerError as problem:
        get_logger().warning(str(problem))
    return status


def _ended(folder: Path, state: State, reason: str) -> RunStatus:
    before = read_status(folder)
    return RunStatus(
        state,
        reason=" ".join(reason.split()),
        pid=before.pid,
        host=before.host,
        process_start=before.process_start,
        started=before.started,
        ended=_now(),
        command=before.command,
    )


def outcome(exc: BaseException | None) -> tuple[State, str]:
    """How a run that raised `exc` (None: returned) ended, and why, in one line."""
    if exc is None:
        return "finished", ""
    if isinstance(exc, KeyboardInterrupt):
        # A stop that says why (pdb's 'q' at a breakpoint) keeps its words; a bare Ctrl-C has none.
        return "killed", str(exc).strip() or "interrupted (Ctrl-C)"
    if isinstance(exc, SystemExit):
        return "killed", f"stopped (exit {exc.code})" if exc.code else "stopped"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return "failed", (first if isinstance(exc, AstunerError) else f"{type(exc).__name__}: {first}")[:300]


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
            command=status.command,
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
    data = json.dumps(asdict(status), indent=1).encode("utf-8")
    path = folder / STATUS_FILE
    temporary = folder / f".{STATUS_FILE}.tmp"
    try:
        temporary.write_bytes(data)
        temporary.replace(path)  # never half a file, even when killed mid-write
        return
    except OSError as exc:
        first = exc
        with suppress(OSError):
            temporary.unlink(missing_ok=True)
    # A full disk has no room for the copy, but the file's own block (a few
    # hundred bytes used of it) takes the new text without growing the file.
    try:
        with path.open("r+b") as out:
            out.write(data)
            out.truncate()
    except OSError:
        raise AstunerError(
            f"Cannot write the run's status to '{path}': {first.strerror or first}. It still says what "
            f"it said before ({read_status(folder).state}), where it should say {status}. Free space on "
            "that disk (or fix the folder's permissions); the run's records are in that folder."
        ) from None


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")
