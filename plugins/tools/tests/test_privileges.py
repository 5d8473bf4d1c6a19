"""Who the model's code runs as: never root in a sandbox, with RLIMIT_NPROC counting its processes.

Each run here is made by a real interpreter in a private (0700) home, the project a git work
tree under /tmp and the umask 077: where pyenv lives in root's home and a newcomer clones into
/tmp, bwrap once showed the folders on the way as 0700, `nobody` seemed unable to run Python,
and the code ran as root, reading /etc/shadow, with no limit on its processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from sandbox_parts import usable

# Runs in the private interpreter, from the project, as astuner would in a training run.
DRIVER = """
import json, sys
from astuner_tools import Limits, run_python_sync
result = run_python_sync(sys.stdin.read(), sandbox=sys.argv[1], timeout=20, limits=Limits(max_processes=20))
print(json.dumps({"returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
                  "notes": list(result.notes)}))
"""

# The model's code: who it is, whether root's secrets open, how far a fork bomb gets.
SNOOP = """
import json, os, time
try:
    open("/etc/shadow").read(1)
    shadow = "read"
except OSError as error:
    shadow = type(error).__name__
started, stopped = 0, ""
for _ in range(60):
    try:
        pid = os.fork()
    except OSError as error:
        stopped = type(error).__name__
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    started += 1
print(json.dumps({"uid": os.getuid(), "shadow": shadow, "started": started, "stopped": stopped}))
"""


def private_python(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A virtual environment in a 0700 home, and a git work tree under /tmp: (python, home, project)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    venv.EnvBuilder(with_pip=False, symlinks=True).create(home / "venv")
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    return home / "venv" / "bin" / "python", home, project


def run_from(python: Path, home: Path, project: Path, sandbox: str, code: str) -> dict:
    """`code` run through astuner_tools by `python`, from `project`, with the umask 077."""
    # astuner and its dependencies from this test's interpreter: the private one has only the stdlib
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join(filter(None, sys.path)),
    }
    umask_077 = ["sh", "-c", 'umask 077 && exec "$0" "$@"']
    done = subprocess.run(
        [*umask_077, str(python), "-c", DRIVER, sandbox],
        input=code,
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("sandbox", ["bwrap", "unshare"])
def test_the_code_runs_unprivileged_with_its_processes_counted(sandbox: str, tmp_path: Path) -> None:
    usable(sandbox)
    assert str(tmp_path).startswith("/tmp/"), "pytest's base temporary folder is the project under /tmp"
    result = run_from(*private_python(tmp_path), sandbox, SNOOP)
    assert result["returncode"] == 0, result["stderr"]
    seen = json.loads(result["stdout"])
    assert seen["uid"] != 0 and "real root" not in result["notes"], result
    if os.geteuid() == 0:
        assert f"uid {seen['uid']}" in result["notes"]  # nobody, in a namespace of its own
    assert seen["shadow"] == "PermissionError"
    assert (seen["stopped"], seen["started"] < 20) == ("BlockingIOError", True), seen
    assert "nproc sandbox" in result["notes"]


@pytest.mark.parametrize("sandbox", ["bwrap", "unshare"])
def test_root_does_not_run_the_code_when_nobody_cannot_read_python(sandbox: str, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root has to drop to nobody")
    usable(sandbox)
    python, home, project = private_python(tmp_path)
    (home / "venv").chmod(0o700)  # the interpreter's own folder, not only the home around it
    result = run_from(python, home, project, sandbox, "print('ran')")
    assert (result["returncode"], result["stdout"]) == (126, ""), result
    assert f"`nobody` cannot read {home / 'venv'}" in result["stderr"]
    assert "chmod o+rX" in result["stderr"] and "Traceback" not in result["stderr"]
