"""Which folders the sandbox hides, and which of their contents it must show again.

The sandbox shows the machine's filesystem read-only, minus folders that
hold the user's own material: the home folder, the project (the git work
tree around the working directory, else the working directory), scratch
space that other programs share (/tmp, /var/tmp, /dev/shm) and /run, where
the sockets of local services live (docker.sock, D-Bus, ssh-agent): a
read-only mount does not stop a connect() to a Unix socket, an empty tmpfs
over its folder does. /tmp and /dev/shm are fresh tmpfs in every sandbox, so
what lies in them (a project cloned under /tmp) is hidden with them.

The interpreter often lives inside one of those (a virtual environment in
the project, pyenv or uv in the home folder), so its folders are bound back,
read-only, over the tmpfs: `kept_paths`.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import sys
from collections.abc import Iterable
from pathlib import Path

# Never hidden, nor any folder above them: the sandbox could not start a program without them.
SYSTEM_FOLDERS = (
    *("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/sbin", "/sys", "/usr"),
)
SHARED_FOLDERS = ("/var/tmp", "/run", "/var/run")
# Replaced by a fresh, empty, writable tmpfs in every sandbox.
FRESH_FOLDERS = ("/tmp", "/dev/shm")


def is_inside(path: str, tops: Iterable[str]) -> bool:
    """Whether `path` lies strictly below one of `tops`."""
    return any(path.startswith(top.rstrip("/") + "/") for top in tops)


def home_folders() -> list[str]:
    """$HOME and the account's home folder (they differ under sudo, or in containers)."""
    found = [os.path.expanduser("~")]
    with contextlib.suppress(KeyError):
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    return found


def project_folder(cwd: str | None = None) -> str:
    """The git work tree that holds the working directory, else the working directory itself."""
    start = Path(cwd or os.getcwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return str(folder)
    return str(start)


def _is_essential(path: str) -> bool:
    return any(system == path or system.startswith(path.rstrip("/") + "/") for system in SYSTEM_FOLDERS)


def _outermost(paths: Iterable[str]) -> list[str]:
    """Sorted, without duplicates and without any path inside another one of them."""
    result: list[str] = []
    for path in sorted(set(paths)):
        if path not in result and not is_inside(path, result):
            result.append(path)
    return result


def hidden_folders(extra: Iterable[str | os.PathLike[str]] = ()) -> list[str]:
    """Folders shown as empty read-only tmpfs (besides /tmp and /dev/shm, fresh writable ones)."""
    candidates = [*home_folders(), project_folder(), *SHARED_FOLDERS, *(os.fspath(p) for p in extra)]
    found = []
    for path in candidates:
        if not os.path.isabs(path) or os.path.islink(path) or not os.path.isdir(path):
            continue
        real = os.path.realpath(path)
        if real != "/" and not _is_essential(real):
            found.append(real)
    return _outermost(found)


def interpreter_paths() -> list[str]:
    """Folders this interpreter needs to start and import its packages (with their real paths too)."""
    prefixes = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    found = set(prefixes) | {os.path.dirname(sys.executable)}
    for entry in sys.path:
        if entry and os.path.isdir(entry) and any(entry.startswith(prefix + os.sep) for prefix in prefixes):
            found.add(entry)
    found |= {os.path.realpath(path) for path in found} | {os.path.realpath(sys.executable)}
    return sorted(path for path in found if os.path.exists(path))


def kept_paths(hidden: Iterable[str]) -> list[str]:
    """The interpreter's folders that lie under a hidden folder or a fresh one: bound back read-only."""
    hidden = list(hidden)
    return _outermost(path for path in interpreter_paths() if is_inside(path, [*hidden, *FRESH_FOLDERS]))
