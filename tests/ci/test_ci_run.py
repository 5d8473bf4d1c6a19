"""`.ci/run`'s order of steps: a failing one does not hide the results of those after it.

The real script runs in a scratch project whose README blocks and step scripts
(`.ci/engines.sh`, `.ci/sandboxes.sh`) are stand-ins that finish at once, each
printing what it was asked: under test are the steps run, what is printed and the
exit status, not the environments the real steps build.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

README = """# scratch

<!-- ci:install -->
```bash
true
```

<!-- ci:test -->
```bash
{test_cmd}
```
"""

ENGINES = """echo "engines.sh $*"
case "$*" in
    "--test vllm") echo "vLLM results"; exit {vllm_exit} ;;
    "--test verl trinity agents") echo "verl, Trinity and frameworks results" ;;
esac
"""


def run_ci(tmp_path: Path, test_cmd: str, vllm_exit: int = 0) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "project"
    (root / ".ci").mkdir(parents=True)
    shutil.copy(REPO / ".ci" / "run", root / ".ci" / "run")
    (root / "README.md").write_text(README.format(test_cmd=test_cmd))
    (root / ".ci" / "engines.sh").write_text(ENGINES.format(vllm_exit=vllm_exit))
    (root / ".ci" / "sandboxes.sh").write_text('echo "sandboxes.sh $*"\n')
    tools = tmp_path / "bin"  # what .ci/run would otherwise apt-get install: found, so it does not
    tools.mkdir()
    for name in ("chromium", "bwrap", "patchelf"):
        (tools / name).write_text("#!/bin/sh\n")
        (tools / name).chmod(0o755)
    return subprocess.run(
        ["bash", str(root / ".ci" / "run")],
        capture_output=True,
        text=True,
        env={"PATH": f"{tools}:/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=120,
    )


@pytest.mark.parametrize("main_exit", [0, 4])
def test_every_step_runs_and_prints_whether_the_main_tests_pass_or_not(
    tmp_path: Path, main_exit: int
) -> None:
    done = run_ci(tmp_path, f"echo main tests; exit {main_exit}")
    for step in ("main tests", "sandboxes.sh --test", "engines.sh --test vllm", "vLLM results"):
        assert step in done.stdout, done.stdout + done.stderr
    assert "verl, Trinity and frameworks results" in done.stdout  # printed from its log, not left there
    if main_exit:
        assert done.returncode == 1
        assert "CI failed: the main tests (exit 4)" in done.stderr
    else:
        assert done.returncode == 0 and "CI failed" not in done.stderr, done.stderr


def test_a_failing_vllm_step_still_prints_the_other_engines(tmp_path: Path) -> None:
    done = run_ci(tmp_path, "echo main tests", vllm_exit=6)
    assert "verl, Trinity and frameworks results" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 1 and "CI failed: the vLLM tests (exit 6)" in done.stderr
