"""The sandbox mechanisms, best first, and the command line that starts each.

- `bwrap` (bubblewrap): namespaces and the read-only view built from its
  command line. Unprivileged where user namespaces are allowed, and on
  distributions that restrict them (Ubuntu 24.04) through its AppArmor profile.
- `unshare` (util-linux): the same namespaces; the launcher (`_fs_view.py`) builds the
  filesystem view itself with mount(2), as the namespace's root.
- `none`: a plain subprocess. Limits, process clean-up and (where the kernel
  lets it) a network namespace still apply; the filesystem does not.

Whether one works is found out once per process by starting it for real:
"installed" is not enough (containers often forbid namespaces).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from astuner_tools.paths import FRESH_FOLDERS, is_inside

Sandbox = Literal["bwrap", "unshare", "none"]
SANDBOXES: tuple[Sandbox, ...] = ("bwrap", "unshare", "none")


@dataclass(frozen=True)
class View:
    """What the code sees of the filesystem and the network."""

    workdir: str
    hide: tuple[str, ...]
    keep: tuple[str, ...]
    tmp_mb: int
    disk_mb: int
    network: bool


def running_as_root() -> bool:
    return os.geteuid() == 0


def bwrap_command(view: View, program: Sequence[str]) -> list[str]:
    """bubblewrap's arguments for `view`, then `program`.

    As root there is no user namespace: the launcher drops to `nobody`
    itself (a user namespace would map the code to the real root, owner of
    every root-only file), so bwrap keeps only the capabilities that needs.
    """
    bwrap = shutil.which("bwrap") or "bwrap"
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for path in FRESH_FOLDERS:
        args += ["--perms", "1777", "--size", str(view.tmp_mb << 20), "--tmpfs", path]
    # a hidden folder in /tmp (a project cloned there) is gone with the fresh /tmp already
    mounted = [path for path in view.hide if not is_inside(path, FRESH_FOLDERS)]
    for path in mounted:
        args += ["--size", str(1 << 20), "--tmpfs", path]
    fresh = [*FRESH_FOLDERS, *mounted]
    made: set[str] = set()

    def folders_on_the_way(path: str) -> list[str]:
        # Made in the fresh tmpfs as searchable by all: bwrap would make them 0700, and `nobody`
        # could then not reach the interpreter nor the workdir.
        steps: list[str] = []
        for parent in reversed(Path(path).parents):
            folder = str(parent)
            if folder not in made and is_inside(folder, fresh):
                made.add(folder)
                steps += ["--perms", "0755", "--dir", folder]
        return steps

    for path in view.keep:
        args += [*folders_on_the_way(path), "--ro-bind", path, path]
    args += folders_on_the_way(view.workdir)
    args += ["--perms", "0777", "--size", str(view.disk_mb << 20), "--tmpfs", view.workdir]
    for path in mounted:  # last: the workdir may lie inside one (TMPDIR in the home folder)
        args += ["--remount-ro", path]
    if running_as_root():
        args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-all"]
    if view.network:
        args += ["--share-net"]
    return [*args, "--die-with-parent", "--new-session", "--chdir", "/", "--", *program]


def unshare_command(view: View, program: Sequence[str]) -> list[str]:
    """util-linux unshare's arguments: the namespaces, with the launcher as the PID namespace's init."""
    unshare = shutil.which("unshare") or "unshare"
    args = [unshare, "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc"]
    args += ["--propagation", "private"]
    if not view.network:
        args += ["--net"]
    if not running_as_root():
        args += ["--user", "--map-root-user"]  # namespace root: allowed to mount, nothing outside
    return [*args, "--", *program]


def command(sandbox: Sandbox, view: View, program: Sequence[str]) -> list[str]:
    if sandbox == "bwrap":
        return bwrap_command(view, program)
    if sandbox == "unshare":
        return unshare_command(view, program)
    return list(program)


def installed(sandbox: Sandbox) -> bool:
    if sandbox == "none":
        return True
    return sys.platform.startswith("linux") and shutil.which(sandbox) is not None


@cache
def probe(sandbox: Sandbox) -> str | None:
    """None if `sandbox` runs code here; else why not (first line of its error). Once per process."""
    if not installed(sandbox):
        return f"{sandbox} is not installed" if sys.platform.startswith("linux") else "not Linux"
    if sandbox == "none":
        return None
    from astuner_tools.run import run_python_sync

    try:
        result = run_python_sync("print('ok')", timeout=20, sandbox=sandbox)
    except OSError as error:
        return f"{sandbox} failed: {error}"
    if result.returncode == 0 and result.stdout == "ok\n":
        return None
    lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    return f"{sandbox} failed: {lines[0] if lines else f'exit status {result.returncode}'}"


def choose(requested: Sandbox | Literal["auto"]) -> tuple[Sandbox, dict[Sandbox, str]]:
    """The sandbox to use and, for each better one passed over, why."""
    if requested != "auto":
        reason = probe(requested)
        if reason is not None:
            raise RuntimeError(f"sandbox {requested!r} is not usable here: {reason}")
        return requested, {}
    skipped: dict[Sandbox, str] = {}
    for sandbox in SANDBOXES:
        reason = probe(sandbox)
        if reason is None:
            return sandbox, skipped
        skipped[sandbox] = reason
    return "none", skipped
