"""A cgroup (v2) of its own for one unsandboxed run, so that all its processes can be killed.

Only used without a sandbox: there a PID namespace does the job. Without
one, a process that calls setsid() leaves the process group that the
caller kills; it stays in the cgroup it was started in, whatever it does,
and `cgroup.kill` (Linux 5.14+) stops every process in it at once. Where
the `pids` controller is enabled for the new group, `pids.max` also caps
how many processes it holds (RLIMIT_NPROC never stops root).

A cgroup can only be made where the caller may write: as root on most
machines, as a user only inside a delegated subtree (systemd's
`user@.service`); containers usually mount it read-only. `create` then
returns None and the launcher's subreaper sweep is what remains.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path


def _cgroup2_mount() -> Path | None:
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if "-" in fields and fields[fields.index("-") + 1] == "cgroup2":
                return Path(fields[4])
    return None


def _own_cgroup() -> str | None:
    with contextlib.suppress(OSError), open("/proc/self/cgroup", encoding="utf-8") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


class CgroupScope:
    """One run's cgroup: `create()`, the launcher joins it, `close()` kills what is in it and removes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.limits_pids = False
        """Whether `pids.max` caps the group (the `pids` controller is enabled for it)."""

    @classmethod
    def create(cls, max_processes: int | None = None) -> CgroupScope | None:
        """A new child of our own cgroup, or None where that cannot be done."""
        mount, own = _cgroup2_mount(), _own_cgroup()
        if mount is None or own is None:
            return None
        path = mount / own.lstrip("/") / f"astuner-python-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError:
            return None
        scope = cls(path)
        if not os.access(path / "cgroup.procs", os.W_OK):
            scope.close()
            return None
        if max_processes and (path / "pids.max").exists():
            with contextlib.suppress(OSError):
                (path / "pids.max").write_text(str(max_processes + 2))  # + the launcher and its fork
                scope.limits_pids = True
        return scope

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        return []

    def close(self, wait_s: float = 2.0) -> None:
        """Kill every process in the group, wait for them to go, remove the group."""
        kill_file = self.path / "cgroup.kill"
        deadline = time.monotonic() + wait_s
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > deadline:
                break
            if kill_file.exists():
                with contextlib.suppress(OSError):
                    kill_file.write_text("1")
            else:  # before Linux 5.14: one by one, until no new one appears
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        with contextlib.suppress(OSError):
            self.path.rmdir()
