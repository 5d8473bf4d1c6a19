"""Helpers shared by the astuner_tools tests: run code in a sandbox, look for processes left behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from astuner_tools import RunResult, run_python_sync
from astuner_tools.backends import probe

REPO = Path(__file__).resolve().parents[3]
# Set by .ci/sandboxes.sh, where every sandbox must work: a sandbox that does not fails its tests
# instead of skipping them. Read at import: the workspace's conftest hides ASTUNER_* from tests.
SANDBOXES_REQUIRED = os.environ.get("ASTUNER_TEST_SANDBOXES_REQUIRED") == "1"


def usable(sandbox: str) -> str:
    """`sandbox`, or skip the test saying why it does not work here (fail it where it must work)."""
    reason = probe(sandbox)  # type: ignore[arg-type]
    if reason is not None:
        message = f"{sandbox} cannot run code here: {reason}"
        if SANDBOXES_REQUIRED:
            pytest.fail(f"{message} (ASTUNER_TEST_SANDBOXES_REQUIRED=1)", pytrace=False)
        pytest.skip(message)
    return sandbox


def run(code: str, sandbox: str, timeout: float = 10, **options: object) -> RunResult:
    return run_python_sync(code, sandbox=sandbox, timeout=timeout, **options)  # type: ignore[arg-type]


def processes_with(marker: str) -> list[int]:
    """Host processes whose command line contains `marker` (zombies not counted)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry))
    return found


def gone(marker: str, within_s: float = 5.0) -> bool:
    """Whether every process with `marker` is gone (SIGKILL was sent; the kernel may take a moment)."""
    deadline = time.monotonic() + within_s
    while processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
