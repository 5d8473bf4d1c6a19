"""The program that runs inside the sandbox, before and around the model's code.

`astuner_tools.run` starts it as `python -I -S -c <this file's text> <plan as JSON>`
(inside bwrap, inside `unshare`, or bare), with the code on stdin, the output
files as stdout/stderr, and a status file descriptor. It is sent as text, not
imported, because in the sandbox the folder it lives in may be hidden; so it
uses the standard library only and never imports astuner or astuner_tools.

It does, in order:

1. (`unshare` only) build the read-only view of the filesystem: the plan
   carries the text of `_fs_view.py`, run here. bwrap does the same from
   its command line, so this step is skipped there.
2. Write the code to `<workdir>/main.py` and fork: this process stays as a
   small init that waits for the code, reaps orphans (it is the child
   subreaper), and on exit or SIGTERM kills every process left below it.
3. In the child: drop root to `nobody` (in a sandbox always: where `nobody`
   cannot read the interpreter, the code is not run), enter a user
   namespace of its own (so RLIMIT_NPROC counts this sandbox's processes
   only, and the mounts above are locked), set the rlimits, and `exec` a
   plain `python main.py`.

The limits are set here rather than through `preexec_fn`: `preexec_fn` is not
safe in a threaded parent (a trainer is), and RLIMIT_NPROC only means "this
sandbox's processes" once the user namespace exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import stat
import sys
import time

# <linux/sched.h>, <linux/prctl.h>
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
NAMESPACES = True  # False: behave as on a kernel that refuses new namespaces (tests of the fallbacks)

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def unreadable_by_others(paths: list[str]) -> str | None:
    """The first of `paths`, or folder on the way, that `nobody` could not search or read; None if none.

    Asked inside the sandbox, of the view the code will have: a private home there is an empty
    tmpfs searchable by all, with the interpreter's folders bound back over it.
    """
    for path in paths:
        parts = os.path.abspath(path).split("/")
        for i in range(1, len(parts) + 1):
            step = "/".join(parts[:i]) or "/"
            try:
                mode = os.stat(step).st_mode
            except OSError:
                return step
            if not mode & stat.S_IXOTH or (i == len(parts) and not mode & stat.S_IROTH):
                return step
    return None


def in_initial_user_namespace() -> bool:
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            return f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return True


def enter_user_namespace(extra_flags: int, inner_uid: int, inner_gid: int) -> bool:
    """A user namespace of our own, we being `inner_uid` in it: RLIMIT_NPROC counts its processes apart."""
    uid, gid = os.geteuid(), os.getegid()
    if _libc is None or not NAMESPACES or _libc.unshare(CLONE_NEWUSER | extra_flags) != 0:
        return False
    # /proc/self belongs to root while the process is not dumpable (the init made itself so, and
    # a change of ids does it too): we could not write our own maps.
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    maps = (("setgroups", "deny"), ("uid_map", f"{inner_uid} {uid} 1"), ("gid_map", f"{inner_gid} {gid} 1"))
    for name, text in maps:
        with open(f"/proc/self/{name}", "w", encoding="ascii") as f:
            f.write(text)
    return True


def count_tasks_of(uid: int) -> int:
    """Threads of `uid` on the host: RLIMIT_NPROC counts them all when there is no user namespace."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            total += int(fields.get("Threads", "1").strip() or 1)
    return total


NETWORK_BLOCKER = """import runpy, socket, sys
def _refuse(*args, **kwargs):
    raise OSError("network access is disabled in execute_python_code")
for _name in ("connect", "connect_ex", "sendto"):
    setattr(socket.socket, _name, _refuse)
socket.getaddrinfo = socket.gethostbyname = socket.create_connection = _refuse
sys.argv = sys.argv[1:]
sys.path[0] = __import__("os").path.dirname(sys.argv[0])
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def nobody() -> tuple[int, int]:
    """The ids of the `nobody` account (65534 on Linux, -2 on macOS)."""
    try:
        import pwd

        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except (ImportError, KeyError):
        return 65534, 65534


def drop_to(uid: int, gid: int) -> None:
    os.setgroups([])
    if hasattr(os, "setresuid"):
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    else:  # macOS
        os.setgid(gid)
        os.setuid(uid)


def become_the_code(plan: dict, status: int) -> None:
    """In the forked child: identity, namespace, limits, then exec the code. Never returns."""
    notes = []
    sandboxed = plan["mode"] != "none"
    real_root = os.geteuid() == 0 and in_initial_user_namespace()
    blocked = unreadable_by_others(plan["interpreter"]) if real_root else None
    if real_root and blocked is not None and sandboxed:
        # as root it could read every root-only file left visible (/etc/shadow), with no RLIMIT_NPROC
        raise PermissionError(
            f"`nobody` cannot read {blocked}, on the way to this Python interpreter, and astuner never runs "
            "model-written code as root in a sandbox; make it readable by all (chmod o+rX on it and the "
            "interpreter's folders) or install Python where every user can read it (docs/security.md)"
        )
    if real_root and blocked is None:
        uid, gid = nobody()
        if not sandboxed:  # a plain folder of root's; in a sandbox it is a tmpfs open to all
            os.chown(plan["workdir"], uid, gid)
        drop_to(uid, gid)
    # The kernel never applies RLIMIT_NPROC to the real root (kuid 0), in any user namespace.
    kernel_root = os.geteuid() == 0 and in_initial_user_namespace()
    if kernel_root:
        notes.append("real root")
    # Under `unshare --map-root-user` we are root of that namespace only: the code gets the caller's ids back.
    inner_uid, inner_gid = os.geteuid(), os.getegid()
    if inner_uid == 0 and not in_initial_user_namespace():
        inner_uid, inner_gid = plan["caller_uid"], plan["caller_gid"]
    if sandboxed:  # bwrap and unshare cut the network already, unless it is allowed
        # a new mount namespace, owned by the new user namespace, locks the mounts made above
        own_userns = enter_user_namespace(CLONE_NEWNS, inner_uid, inner_gid)
        if not own_userns and os.geteuid() == 0:
            # still root with capabilities over these mounts: it could unmount what hides the home folder
            raise PermissionError("no user namespace to drop root's capabilities in; not running the code")
        network = "open" if plan["network"] else "cut"
    elif plan["network"]:
        own_userns, network = enter_user_namespace(0, inner_uid, inner_gid), "open"
    else:
        own_userns = enter_user_namespace(CLONE_NEWNET, inner_uid, inner_gid)
        cut = own_userns or (_libc is not None and NAMESPACES and _libc.unshare(CLONE_NEWNET) == 0)
        network = "cut" if cut else "python-only"
    # RLIMIT_NPROC counts the real user's tasks in the current user namespace: with a namespace of
    # our own the count is this sandbox's alone; without, the user's tasks everywhere are counted.
    limits = plan["limits"]
    nproc = limits["nproc"]
    if nproc is None:
        notes.append("nproc unlimited")
    elif kernel_root:
        notes.append("nproc unenforced")
    elif own_userns or not in_initial_user_namespace():
        notes.append("nproc sandbox")
    elif not os.path.isdir("/proc"):  # macOS: the user's processes cannot be counted; leave it
        nproc = None
        notes.append("nproc unset")
    else:
        nproc += count_tasks_of(os.getuid())
        notes.append("nproc host-count")
    for which, value in (
        (resource.RLIMIT_CPU, limits["cpu_s"]),
        (resource.RLIMIT_AS, limits["as_bytes"]),
        (resource.RLIMIT_FSIZE, limits["fsize_bytes"]),
        (resource.RLIMIT_NOFILE, limits["nofile"]),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, nproc),
    ):
        if value is None:
            continue
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):  # macOS refuses some (RLIMIT_AS); Linux does not
            notes.append(f"rlimit {which} not set")
    notes.append(f"uid {os.geteuid()}")
    notes.append(f"network {network}")
    os.write(status, ("\n".join(notes) + "\n").encode())
    os.close(status)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.chdir(plan["workdir"])
    if _libc is not None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # last: a change of ids clears it
    argv = [sys.executable, "-E", "-s", "-u", "-X", "utf8"]
    if network == "python-only":
        argv += ["-c", NETWORK_BLOCKER]
    os.execve(sys.executable, [*argv, plan["script"]], plan["env"])


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def kill_everything_below(deadline_s: float = 5.0) -> None:
    """SIGKILL our children until none is left; orphans (setsid ones too) come back to us as subreaper."""
    if not os.path.isdir("/proc"):
        return
    me, deadline = os.getpid(), time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for pid in children_of(me):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        time.sleep(0.005)


def build_view(plan: dict) -> None:
    """Run `_fs_view.py`, sent as text in the plan like this file on the command line, to build the view."""
    view: dict = {"__name__": "astuner_fs_view"}
    exec(compile(plan["fs_view"], "_fs_view.py", "exec"), view)
    view["build_filesystem"](plan)


def main() -> None:
    global NAMESPACES
    plan = json.loads(sys.argv[1])
    NAMESPACES = plan.get("namespaces", True)
    status = plan["status_fd"]
    # What is made below (folders on the way to the interpreter, main.py) must be readable by `nobody`,
    # whatever the caller's umask.
    os.umask(0o022)
    if plan.get("cgroup"):  # best effort: the subreaper sweep below works without it
        with contextlib.suppress(OSError), open(os.path.join(plan["cgroup"], "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    if plan["mode"] == "unshare":
        build_view(plan)
    code = sys.stdin.buffer.read()
    with open(plan["script"], "wb") as f:
        f.write(code)
    if _libc is not None:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the code may not ptrace this process
    child = os.fork()
    if child == 0:
        try:
            become_the_code(plan, status)
        except BaseException as error:  # a failure to confine: never run the code unconfined
            where = error.__traceback__
            while where is not None and where.tb_next is not None:
                where = where.tb_next
            line = f" (launcher line {where.tb_lineno})" if where is not None else ""
            os.write(2, f"sandbox setup failed: {error!r}{line}\n".encode())
        os._exit(126)

    # In a sandbox, this process ending ends the PID namespace and all in it; without one, the sweep.
    sweep = plan["mode"] == "none"

    def stop(signum: int, frame: object) -> None:
        if sweep:
            kill_everything_below()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            break
    if os.WIFSIGNALED(wait_status):
        os.write(status, f"signal {os.WTERMSIG(wait_status)}\n".encode())
    else:
        os.write(status, f"exit {os.waitstatus_to_exitcode(wait_status)}\n".encode())
    if sweep:
        kill_everything_below()
    os._exit(0)


if __name__ == "__main__":
    main()
