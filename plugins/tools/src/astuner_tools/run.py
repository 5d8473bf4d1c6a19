"""Running a piece of Python code confined: the caller's side.

One run: a private temporary folder (removed afterwards) holding the code
and the output files; the launcher (`_launcher.py`) started inside the
chosen sandbox with a minimal environment; a wall-clock limit; and,
whatever happens (normal end, time limit, the caller cancelled), every
process the code started is killed before this returns. With a sandbox the
PID namespace guarantees that: when its first process ends the kernel kills
the rest, setsid() or not. Without one, the launcher's subreaper sweep, the
process group and, where it can be made, a cgroup do.

Output goes to files, not pipes: a process left behind cannot hold them
open and keep the caller waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO, Any, Literal

from astuner.api import warn_once
from astuner_tools.backends import Sandbox, View, choose, command, running_as_root
from astuner_tools.cgroup import CgroupScope
from astuner_tools.limits import Limits
from astuner_tools.paths import hidden_folders, interpreter_paths, kept_paths

NAMESPACES = True
"""Without a sandbox, still try a user and network namespace (tests turn it off to check the fallbacks)."""
OUTER_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
DOCS = "docs/security.md"


@cache
def launcher_source(name: str = "_launcher.py") -> str:
    """The text of a file sent into the sandbox: the launcher, or the `unshare` view it runs."""
    return Path(__file__).with_name(name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class RunResult:
    """How one run ended. `returncode` is -1 when the time limit stopped it, as in AgentScope."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    sandbox: Sandbox
    notes: tuple[str, ...] = field(default=())
    """What the run reported: `uid N` (the code's, as it sees it), `real root` (only without a sandbox),
    `network cut|open|python-only`, `nproc sandbox|host-count|unenforced|unset|unlimited`
    (how RLIMIT_NPROC counts), `pids cgroup`."""


def code_env(workdir: str) -> dict[str, str]:
    """The code's whole environment: none of the caller's proxies, tokens, PYTHONPATH or CUDA settings."""
    return {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "PYTHONUTF8": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        # one thread per numerical library: threads count against the process limit
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


@dataclass
class _Run:
    folder: Path
    argv: list[str]
    sandbox: Sandbox
    cgroup: CgroupScope | None
    stdin: IO[bytes]
    stdout: IO[bytes]
    stderr: IO[bytes]
    status: IO[bytes]


@contextlib.contextmanager
def _prepared(
    code: str,
    timeout: float,
    limits: Limits,
    allow_network: bool,
    sandbox: Sandbox,
    hidden_paths: Iterable[str | os.PathLike[str]],
) -> Iterator[_Run]:
    """The folder, files and command line of one run; on exit the cgroup and the folder are removed."""
    folder = Path(tempfile.mkdtemp(prefix="astuner-python-"))
    cgroup = None
    try:
        workdir = folder / "work"
        workdir.mkdir()
        (folder / "main.py").write_text(code, encoding="utf-8", errors="surrogatepass")
        if running_as_root() and sandbox == "none":
            folder.chmod(0o711)  # the launcher hands the workdir to `nobody`, who must reach it
        hide = hidden_folders(hidden_paths) if sandbox != "none" else []
        view = View(
            workdir=str(workdir),
            hide=tuple(hide),
            keep=tuple(kept_paths(hide)) if sandbox != "none" else (),
            tmp_mb=limits.disk_mb,
            disk_mb=limits.disk_mb,
            network=allow_network,
        )
        if sandbox == "none":
            cgroup = CgroupScope.create(limits.max_processes)
        with contextlib.ExitStack() as files:
            stdin = files.enter_context((folder / "main.py").open("rb"))
            stdout = files.enter_context((folder / "stdout").open("wb"))
            stderr = files.enter_context((folder / "stderr").open("wb"))
            status = files.enter_context((folder / "status").open("wb"))
            plan = {
                "mode": sandbox,
                "workdir": view.workdir,
                "script": str(workdir / "main.py"),
                "status_fd": status.fileno(),
                "hide": list(view.hide),
                "keep": list(view.keep),
                "tmp_mb": view.tmp_mb,
                "disk_mb": view.disk_mb,
                "limits": limits.rlimits(timeout),
                "network": allow_network,
                "namespaces": NAMESPACES,
                "caller_uid": os.getuid(),
                "caller_gid": os.getgid(),
                "interpreter": interpreter_paths(),
                "env": code_env(view.workdir),
                "cgroup": str(cgroup.path) if cgroup else None,
                "fs_view": launcher_source("_fs_view.py") if sandbox == "unshare" else None,
            }
            # -I -S: no environment, no site-packages: the launcher needs the standard library only
            program = [sys.executable, "-I", "-S", "-c", launcher_source(), json.dumps(plan)]
            argv = command(sandbox, view, program)
            yield _Run(folder, argv, sandbox, cgroup, stdin, stdout, stderr, status)
    finally:
        if cgroup is not None:
            cgroup.close()
        shutil.rmtree(folder, ignore_errors=True)


def _spawn_options(run: _Run) -> dict[str, Any]:
    """How the launcher is started: on the run's files, in the outer environment, in a session of its own."""
    return {
        "stdin": run.stdin,
        "stdout": run.stdout,
        "stderr": run.stderr,
        "env": OUTER_ENV,
        "cwd": "/",
        "start_new_session": True,
        "pass_fds": (run.status.fileno(),),
    }


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def read_clipped(path: Path, max_chars: int) -> str:
    """The file's text, cut to `max_chars` with a note saying so (only that much is read)."""
    if not path.exists():
        return ""
    size = path.stat().st_size
    with path.open("rb") as f:
        text = f.read(max_chars * 4).decode("utf-8", "replace")
    if len(text) <= max_chars and size <= max_chars * 4:
        return text
    return text[:max_chars] + f"\n... (output cut at {max_chars} of {size} bytes)"


def _result(run: _Run, outer_returncode: int | None, timed_out: bool, limits: Limits) -> RunResult:
    for f in (run.stdout, run.stderr, run.status):
        f.flush()
    lines = (run.folder / "status").read_text(encoding="utf-8", errors="replace").splitlines()
    notes = tuple(line for line in lines if not line.startswith(("exit ", "signal ")))
    returncode = outer_returncode if outer_returncode is not None else -1
    for line in lines:
        kind, _, value = line.partition(" ")
        if kind in ("exit", "signal") and value.lstrip("-").isdigit():
            returncode = int(value) if kind == "exit" else -int(value)
    stdout = read_clipped(run.folder / "stdout", limits.output_chars)
    stderr = read_clipped(run.folder / "stderr", limits.output_chars)
    if timed_out:
        returncode = -1
    if run.cgroup is not None and run.cgroup.limits_pids:
        notes = (*notes, "pids cgroup")
    _warn_about(notes)
    return RunResult(returncode, stdout, stderr, timed_out, run.sandbox, notes)


def _warn_about(notes: tuple[str, ...]) -> None:
    if "nproc unenforced" in notes and "pids cgroup" not in notes:
        warn_once(
            "tools-nproc",
            "execute_python_code: no limit on the number of processes: the code runs as the real root, "
            "whose processes the kernel never counts, and no pids cgroup caps them; a fork bomb is only "
            f"stopped by the time and memory limits. See {DOCS}.",
        )


def _choose(sandbox: Sandbox | Literal["auto"], allow_network: bool) -> Sandbox:
    chosen, skipped = choose(sandbox)
    if chosen == "none":
        why = "; ".join(f"{name}: {reason}" for name, reason in skipped.items()) or "sandbox='none' was asked"
        network = (
            "network is open (allow_network)"
            if allow_network
            else "network is cut only where the kernel allows a network namespace, "
            "else only Python's socket module refuses"
        )
        warn_once(
            "tools-no-sandbox",
            "execute_python_code runs model-written code WITHOUT a sandbox: it can read and write every "
            f"file its user can ({why}); {network}. Install bubblewrap (`apt-get install bubblewrap`) "
            f"or allow user namespaces. See {DOCS}.",
        )
    return chosen


async def run_python(
    code: str,
    *,
    timeout: float | None = None,
    limits: Limits | None = None,
    allow_network: bool = False,
    sandbox: Sandbox | Literal["auto"] = "auto",
    hidden_paths: Iterable[str | os.PathLike[str]] = (),
) -> RunResult:
    """Run `code` as `python main.py` in a fresh sandbox; `timeout` defaults to, and is cut to, the limits'.

    `sandbox="auto"` takes bwrap, else unshare, else none (warning once);
    naming one raises RuntimeError where it does not work. `hidden_paths`
    are hidden besides the home folder, the project and /run.
    """
    limits = limits or Limits()
    # the first call probes the sandboxes (a few tenths of a second): not on the event loop
    chosen = await asyncio.to_thread(_choose, sandbox, allow_network)
    seconds = limits.effective_timeout(limits.max_timeout if timeout is None else timeout)
    with _prepared(code, seconds, limits, allow_network, chosen, hidden_paths) as run:
        proc = await asyncio.create_subprocess_exec(*run.argv, **_spawn_options(run))
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), seconds)
        except asyncio.TimeoutError:
            timed_out = True
        finally:  # also when the caller is cancelled: nothing outlives the call
            if proc.returncode is None and chosen == "none":
                # no PID namespace: the launcher, as subreaper, kills what the code started, then exits
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(proc.wait(), 5)
            _kill_group(proc.pid)
            await proc.wait()
        return _result(run, proc.returncode, timed_out, limits)


def run_python_sync(
    code: str,
    *,
    timeout: float | None = None,
    limits: Limits | None = None,
    allow_network: bool = False,
    sandbox: Sandbox | Literal["auto"] = "auto",
    hidden_paths: Iterable[str | os.PathLike[str]] = (),
) -> RunResult:
    """`run_python` without an event loop (and without the sandbox probe when a sandbox is named)."""
    limits = limits or Limits()
    chosen: Sandbox = _choose(sandbox, allow_network) if sandbox in ("auto", "none") else sandbox
    seconds = limits.effective_timeout(limits.max_timeout if timeout is None else timeout)
    with _prepared(code, seconds, limits, allow_network, chosen, hidden_paths) as run:
        proc = subprocess.Popen(run.argv, **_spawn_options(run))
        timed_out = False
        try:
            proc.wait(seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if proc.returncode is None and chosen == "none":
                proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
            _kill_group(proc.pid)
            proc.wait()
        return _result(run, proc.returncode, timed_out, limits)
