"""The real command line in a subprocess, as a user runs it, for end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def run_astuner(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """`python -m astuner ARGS` in `cwd`, output captured.

    The developer's `ASTUNER_*` settings are left out (a test states its
    own in `env`), so a test sees the defaults a fresh shell would.
    """
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "astuner", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
