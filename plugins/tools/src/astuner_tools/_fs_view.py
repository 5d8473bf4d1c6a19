"""The `unshare` backend's filesystem view, built inside the sandbox by the launcher.

What bwrap's `--ro-bind / / --tmpfs ... --bind ...` gives: every mount
read-only, empty tmpfs over the hidden folders (home, project, /run, ...),
the interpreter's folders bound back read-only, a fresh /tmp, a minimal /dev,
and the working directory as a small writable tmpfs.

Like `_launcher.py`, this file is sent as text and run in the sandbox (the
launcher executes it from the plan only for the `unshare` backend), so it uses
the standard library only and never imports astuner or astuner_tools.
"""

from __future__ import annotations

import ctypes
import os
import stat

# <sys/mount.h>, <linux/mount.h>
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY, SYS_MOUNT_SETATTR = -100, 0x8000, 1, 442
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

_libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args: object) -> None:
    """Call a libc function, raising OSError with its errno on failure."""
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}{args[:2]}: {os.strerror(errno)}")


def _b(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _call("mount", _b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data))


def tmpfs(target: str, mode: str, size_mb: int, flags: int = MS_NOSUID | MS_NODEV) -> None:
    os.makedirs(target, exist_ok=True)
    mount("tmpfs", target, "tmpfs", flags, f"mode={mode},size={max(1, size_mb)}m")


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def set_read_only(path: str, read_only: bool, recursive: bool) -> bool:
    """mount_setattr(2) (Linux 5.12+): flip the read-only flag of a mount (tree). False if unsupported."""
    assert _libc is not None
    attr = _MountAttr(MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    result = _libc.syscall(
        SYS_MOUNT_SETATTR, AT_FDCWD, _b(path), flags, ctypes.byref(attr), ctypes.sizeof(attr)
    )
    if result == 0:
        return True
    if ctypes.get_errno() == 38:  # ENOSYS: an older kernel
        return False
    raise OSError(ctypes.get_errno(), f"mount_setattr {path}: {os.strerror(ctypes.get_errno())}")


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            point = line.split()[4]
            for code in ("\\040", "\\011", "\\012", "\\134"):
                point = point.replace(code, chr(int(code[1:], 8)))
            points.append(point)
    return points


def remount_all_read_only(writable: set[str], use_setattr: bool = True) -> None:
    """Make every mount read-only except `writable` (and /proc, which namespaced ids write to)."""
    keep_writable = {*writable, "/proc"}
    if use_setattr and set_read_only("/", True, recursive=True):
        for path in keep_writable:
            set_read_only(path, False, recursive=False)
        return
    # Older kernels: one remount per mount point, keeping the flags a user namespace locks.
    for point in _mount_points():
        if point in keep_writable or point.startswith("/proc/"):
            continue
        try:
            st = os.statvfs(point)
        except OSError:
            continue  # covered by a later mount
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for st_flag, ms_flag in (
            (os.ST_NOSUID, MS_NOSUID),
            (os.ST_NODEV, MS_NODEV),
            (os.ST_NOEXEC, MS_NOEXEC),
            (os.ST_NOATIME, MS_NOATIME),
            (os.ST_NODIRATIME, MS_NODIRATIME),
            (os.ST_RELATIME, MS_RELATIME),
        ):
            if st.f_flag & st_flag:
                flags |= ms_flag
        try:
            mount(None, point, None, flags)
        except OSError:
            if point == "/":
                raise


def build_filesystem(plan: dict) -> None:
    """The `unshare` backend's view: what bwrap's `--ro-bind / / --tmpfs ... --bind ...` gives."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Hold what must reappear under the tmpfs mounts: a mount over a folder hides its old content by path,
    # not for an open descriptor, and /proc/self/fd/N binds it back.
    kept = {path: os.open(path, os.O_PATH) for path in plan["keep"] if os.path.exists(path)}
    devices = {name: os.open(f"/dev/{name}", os.O_PATH) for name in DEVICES if os.path.exists(f"/dev/{name}")}
    for path in plan["hide"]:
        if os.path.isdir(path) and not os.path.islink(path):
            tmpfs(path, "0755", 1, MS_NOSUID | MS_NODEV | MS_NOEXEC)
    tmpfs("/tmp", "1777", plan["tmp_mb"])
    tmpfs("/dev", "0755", 1, MS_NOSUID | MS_NOEXEC)
    for name, fd in devices.items():
        open(f"/dev/{name}", "w").close()
        mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, MS_BIND)
        os.close(fd)
    os.symlink("/proc/self/fd", "/dev/fd")
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{number}", f"/dev/{name}")
    tmpfs("/dev/shm", "1777", plan["tmp_mb"])
    for path, fd in kept.items():
        if not os.path.exists(path):
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").close()
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    tmpfs(plan["workdir"], "0777", plan["disk_mb"])
    remount_all_read_only({"/tmp", "/dev/shm", plan["workdir"]})
