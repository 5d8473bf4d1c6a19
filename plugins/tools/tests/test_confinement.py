"""The escapes of the adversarial sweep, each run in every sandbox that works here.

Tests taking `confined_or_not` also run without a sandbox, where they must
fail (strict xfail): that is what shows they catch the escape. Tests taking
`confined` only run in bwrap and unshare.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from astuner_tools import Limits, run_python
from astuner_tools.cgroup import CgroupScope
from astuner_tools.paths import kept_paths
from astuner_tools.run import code_env
from sandbox_parts import REPO, gone, processes_with, run, usable

LIST_AND_READ = """
import json, os
folder, secret = {folder!r}, {secret!r}
try:
    names = sorted(os.listdir(folder))
except OSError as error:
    names = [type(error).__name__]
try:
    text = open(secret).read(100)
except OSError as error:
    text = type(error).__name__
print(json.dumps({{"names": names, "text": text}}))
"""


def list_and_read(folder: Path, secret: Path, sandbox: str) -> tuple[list[str], str]:
    result = run(LIST_AND_READ.format(folder=str(folder), secret=str(secret)), sandbox)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    return seen["names"], seen["text"]


def shown_again(folder: Path) -> set[str]:
    """Names in `folder` that the sandbox shows again: the way to the interpreter's own folders."""
    names = set()
    for kept in kept_paths([str(folder)]):
        relative = Path(kept).relative_to(folder) if Path(kept).is_relative_to(folder) else None
        if relative is not None and relative.parts:
            names.add(relative.parts[0])
    return names


def test_the_home_folder_is_hidden(confined_or_not: str) -> None:
    home = Path.home()
    secret = next((p for p in sorted(home.iterdir()) if p.is_file() and not p.is_symlink()), None)
    made = secret is None
    if made:
        secret = home / f".astuner-test-{uuid.uuid4().hex[:8]}"
        secret.write_text("secret")
    try:
        names, text = list_and_read(home, secret, confined_or_not)
    finally:
        if made:
            secret.unlink()
    assert set(names) <= shown_again(home)  # empty, but for the way to a pyenv/uv interpreter in it
    assert text in ("FileNotFoundError", "PermissionError")


def test_the_project_is_hidden(confined_or_not: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO / "kernel")  # the project is the git work tree around the working directory
    names, text = list_and_read(REPO, REPO / "pyproject.toml", confined_or_not)
    if names != ["FileNotFoundError"]:  # a project under /tmp is not there at all: the fresh /tmp hides it
        assert set(names) <= shown_again(REPO)  # at most the way to a virtual environment in it
    assert "kernel" not in names and "README.md" not in names
    assert text == "FileNotFoundError"


def test_more_folders_can_be_hidden(confined: str) -> None:
    folder = Path("/var/lib")
    if not folder.is_dir() or not any(folder.iterdir()):
        pytest.skip("no /var/lib with something in it to hide")
    result = run("import os; print(os.listdir('/var/lib'))", confined, hidden_paths=[folder])
    assert result.stdout == "[]\n", result.stderr


WRITE_EVERYWHERE = """
import os, sys
for path in {paths!r}:
    try:
        with open(path, "w") as f:
            f.write("escaped")
        print("wrote", path)
    except OSError as error:
        print(type(error).__name__, path)
"""


def test_nothing_outside_the_workdir_can_be_written(confined_or_not: str) -> None:
    name = f"astuner-escape-{uuid.uuid4().hex[:8]}"
    # harmless places on the host, so that the run without a sandbox (expected to write) does no harm
    targets = [Path.home() / f".{name}", REPO / "test-artifacts" / name, Path("/var/tmp") / name]
    (REPO / "test-artifacts").mkdir(exist_ok=True)
    try:
        result = run(WRITE_EVERYWHERE.format(paths=[str(p) for p in targets]), confined_or_not)
        written = [p for p in targets if p.exists()]
    finally:
        for path in targets:
            path.unlink(missing_ok=True)
    assert result.returncode == 0, result.stderr
    assert "wrote" not in result.stdout
    assert written == []


def test_system_files_are_read_only_and_root_only_ones_closed(confined: str) -> None:
    paths = ["/etc/astuner-escape", "/usr/astuner-escape", "/astuner-escape", "/var/astuner-escape"]
    code = (
        WRITE_EVERYWHERE.format(paths=paths)
        + """
print(os.getuid(), open('/etc/passwd').read().startswith('root:'))
try:
    open('/etc/shadow').read()
    print('read /etc/shadow')
except OSError as error:
    print(type(error).__name__, '/etc/shadow')
"""
    )
    result = run(code, confined)
    lines = result.stdout.splitlines()
    assert all(line.startswith(("OSError", "PermissionError")) for line in lines[: len(paths)]), lines
    assert not any(Path(p).exists() for p in paths)
    uid, passwd = lines[len(paths)].split()
    assert passwd == "True"  # documented: the system's own files stay readable, read-only
    assert uid != "0"  # root runs the code as nobody, or not at all (test_privileges.py)
    assert lines[-1] == "PermissionError /etc/shadow"


def test_the_workdir_and_tmp_are_private_and_writable(confined: str) -> None:
    name = f"astuner-private-{uuid.uuid4().hex[:8]}"
    code = f"""
import os
open('notes.txt', 'w').write('kept')
print(open('notes.txt').read(), sorted(os.listdir('.')))
open('/tmp/{name}', 'w').write('x')
print(os.getcwd())
print(' '.join(sorted(os.environ)))
"""
    result = run(code, confined)
    assert result.returncode == 0, result.stderr
    first, cwd, env = result.stdout.splitlines()
    assert first == "kept ['main.py', 'notes.txt']"
    assert not Path(f"/tmp/{name}").exists()  # the sandbox's /tmp is its own
    assert not Path(cwd).exists()  # and so is its working directory, gone afterwards
    assert set(env.split()) <= set(code_env(cwd))  # none of the caller's variables


def test_a_setsid_child_does_not_survive(confined: str) -> None:
    marker = f"333.{uuid.uuid4().int % 10**6}"  # a unique `sleep` argument to find it on the host
    code = f"import subprocess; subprocess.Popen(['setsid', 'sleep', '{marker}']); print('started')"
    result = run(code, confined)
    assert result.stdout == "started\n", result.stderr
    assert gone(marker)


def test_a_setsid_child_does_not_survive_without_a_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    # no PID namespace, and here no cgroup either: the launcher, as child subreaper, kills it
    monkeypatch.setattr("astuner_tools.run.CgroupScope.create", classmethod(lambda cls, limit=None: None))
    marker = f"333.{uuid.uuid4().int % 10**6}"
    daemon = f"setsid sleep {marker} & exit"  # `sh` exits at once, orphaning it
    code = f"import subprocess; subprocess.Popen(['sh', '-c', '{daemon}']); print('started')"
    result = run(code, "none")
    assert result.stdout == "started\n", result.stderr
    assert gone(marker)


FORK_BOMB = """
import os, sys, time
started = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError as error:
        print("stopped", started, type(error).__name__)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    started += 1
else:
    print("not stopped", started)
print(__file__, flush=True)
"""


def test_a_fork_bomb_is_stopped_by_the_process_limit(confined: str) -> None:
    began = time.monotonic()
    result = run(FORK_BOMB, confined, limits=Limits(max_processes=20))
    assert time.monotonic() - began < 5
    first, script = result.stdout.splitlines()
    assert first.startswith("stopped") and first.endswith("BlockingIOError"), result.stdout + result.stderr
    assert int(first.split()[1]) < 20
    assert "nproc sandbox" in result.notes
    assert gone(script)  # and the sleeping children went with the sandbox


def test_the_time_limit_kills_a_busy_loop(confined: str) -> None:
    began = time.monotonic()
    result = run("print('before', flush=True)\nwhile True: pass", confined, timeout=1)
    assert time.monotonic() - began < 4
    assert result.timed_out and result.returncode == -1
    assert result.stdout == "before\n"


DIAL = """
import _socket
for host, port in {targets!r}:
    s = _socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        print("connected", host)
    except OSError as error:
        print("refused", host, type(error).__name__)
"""


def test_there_is_no_network(confined: str, host_listener: tuple[str, int]) -> None:
    # `_socket` is below Python's socket module: no patching stops it, only a network namespace.
    result = run(DIAL.format(targets=[host_listener, ("1.1.1.1", 80)]), confined)
    assert "connected" not in result.stdout, result.stdout
    assert result.stdout.count("refused") == 2, result.stderr


def test_without_a_sandbox_the_network_is_cut_where_a_namespace_can_be_made(
    host_listener: tuple[str, int],
) -> None:
    result = run(DIAL.format(targets=[host_listener]), "none")
    if "network cut" in result.notes:  # root, or user namespaces allowed
        assert result.stdout.startswith("refused"), result.stdout
    else:  # only Python's socket module refuses: `_socket` gets through (the documented gap)
        assert "network python-only" in result.notes
        assert result.stdout == "connected 127.0.0.1\n"


def test_the_network_can_be_allowed(confined: str, host_listener: tuple[str, int]) -> None:
    result = run(DIAL.format(targets=[host_listener]), confined, allow_network=True)
    assert result.stdout == "connected 127.0.0.1\n"


def test_ordinary_code_works(confined: str) -> None:
    result = run("print(sum(range(10)))", confined)
    assert (result.returncode, result.stdout, result.stderr) == (0, "45\n", "")


def test_numpy_works(confined: str) -> None:
    pytest.importorskip("numpy")
    result = run("import numpy as np; print(int(np.arange(10).sum()))", confined)
    assert (result.returncode, result.stdout) == (0, "45\n"), result.stderr


@pytest.mark.parametrize("sandbox", ["bwrap", "unshare", "none"])
def test_a_cancelled_call_leaves_nothing_running(sandbox: str) -> None:
    usable(sandbox)
    marker = f"333.{uuid.uuid4().int % 10**6}"
    code = f"import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '{marker}'])\ntime.sleep(60)"

    async def start_then_cancel() -> None:
        call = asyncio.create_task(run_python(code, sandbox=sandbox, timeout=60))  # type: ignore[arg-type]
        deadline = time.monotonic() + 10
        while not processes_with(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call

    asyncio.run(start_then_cancel())
    assert gone(marker)


def test_a_cgroup_kills_what_escaped_the_process_group() -> None:
    scope = CgroupScope.create()
    if scope is None:
        pytest.skip("no writable cgroup v2 here")
    marker = f"333.{uuid.uuid4().int % 10**6}"
    join = f"echo $$ > {scope.path}/cgroup.procs && exec setsid sleep {marker}"
    subprocess.Popen(["sh", "-c", join], start_new_session=True)
    # setsid forks when its caller leads a process group: wait until the sleep itself runs in the scope.
    deadline = time.monotonic() + 5
    while not (scope.pids() and processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert processes_with(marker)
    scope.close()
    assert gone(marker) and not scope.path.exists()


def test_calls_run_side_by_side(confined: str) -> None:
    async def three() -> list[str]:
        calls = [run_python(f"print({n})", sandbox=confined) for n in range(3)]  # type: ignore[arg-type]
        return [result.stdout for result in await asyncio.gather(*calls)]

    assert asyncio.run(three()) == ["0\n", "1\n", "2\n"]


def test_the_code_never_keeps_capabilities_over_its_mounts(
    confined: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("astuner_tools.run.NAMESPACES", False)  # as if no user namespace could be made
    result = run("import os; print(os.geteuid())", confined)
    if os.geteuid() != 0 and confined == "unshare":
        # root of `unshare --map-root-user`'s namespace, owner of the mounts that hide the home folder
        assert (result.returncode, result.stdout) == (126, "")
        assert "sandbox setup failed" in result.stderr and "not running the code" in result.stderr
    else:  # root dropped to nobody; bwrap's unprivileged user never had them
        assert result.returncode == 0 and result.stdout not in ("", "0\n"), result.stderr
