"""A command notifier that hangs is stopped with every process it started, never left under PID 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from astuner.testing.backbones import only_run, run_ending

# The command: starts a child that would outlive it, says both PIDs, then hangs.
HANGING = """
import os, pathlib, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
pathlib.Path(sys.argv[1]).write_text(f"{os.getpid()} {child.pid}")
time.sleep(120)
"""


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone_within(pids: list[int], seconds: float) -> list[int]:
    """The PIDs of `pids` still running after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.fixture
def started(workdir: Path) -> Iterator[Path]:
    """Where the hanging command writes its PIDs; whatever of it still runs afterwards is killed."""
    pids = workdir / "pids.txt"
    yield pids
    for pid in map(int, pids.read_text().split()) if pids.exists() else ():
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_a_command_past_its_timeout_is_stopped_with_the_child_it_started(
    app, write_config, workdir: Path, started: Path
) -> None:
    command = {"command": [sys.executable, "-c", HANGING, str(started)], "timeout_s": 1.5}
    began = time.monotonic()
    result = run_ending(app, write_config({"notify": {"command": command}}, name="hang.yaml"))
    assert result.exit_code == 0, result.output
    assert time.monotonic() - began < 25  # the timeout ended the wait, not the kernel's 30 s
    pids = [int(p) for p in started.read_text().split()]
    assert gone_within(pids, 5) == []  # the command and its child
    log = (only_run(workdir, "hang") / "astuner.log").read_text()
    (failure,) = [json.loads(line) for line in log.splitlines() if "notifier failed" in line]
    assert (
        "still ran after notify.command.timeout_s (1.5 s): stopped it and every process" in (failure["error"])
    )


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_a_command_still_running_when_astuner_exits_is_stopped_with_its_child(started: Path) -> None:
    # The kernel leaves a busy notifier behind in a daemon thread and exits; its timeout never comes.
    script = f"""
import sys, threading, time
from pathlib import Path
from astuner.api import RunSummary
from astuner_notify.notifiers import CommandNotifier, CommandSettings
pids = Path({str(started)!r})
settings = CommandSettings(command=[sys.executable, "-c", {HANGING!r}, str(pids)], timeout_s=300)
summary = RunSummary("x", "x", "torch", "finished", "", "", "", 0.0, 0)
threading.Thread(target=CommandNotifier(settings).notify, args=(summary,), daemon=True).start()
while not pids.exists() or len(pids.read_text().split()) < 2:
    time.sleep(0.05)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    pids = [int(p) for p in started.read_text().split()]
    assert gone_within(pids, 5) == []
