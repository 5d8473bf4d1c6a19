"""`astuner --version` answers before the command line loads anything it does not need.

A fresh `python -m astuner --version` runs under a probe that forbids
building typer's app (`make_app`) and reports the modules loaded at exit:
neither the plugin manager, any plugin, the config models nor logging.
What is checked is what got imported, not how long it took, so the test
holds on a loaded machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from astuner.cli import asks_version
from astuner.version import kernel_version

PROBE = """
import atexit, json, runpy, sys

import astuner.cli

def refuse(*args, **kwargs):
    raise SystemExit("make_app was called")

astuner.cli.make_app = refuse
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv = ["astuner", *sys.argv[1:]]
runpy.run_module("astuner", run_name="__main__", alter_sys=True)
"""
NOT_LOADED = (
    "astuner.plugins",
    "astuner.config",
    "astuner.lifecycle",
    "astuner.companions",
    "astuner.default_plugins",
    "astuner.logs",
    "astuner.rollout",
    "pluggy",
    "pydantic",
    "structlog",
    "rich",
    "yaml",
)


def _probe(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, check=False
    )
    modules = set(json.loads(run.stderr.strip().splitlines()[-1]))
    return run, modules


@pytest.mark.parametrize("argv", [["--version"], ["-v", "--version"], ["--version", "run"]])
def test_version_loads_no_app_no_plugins_no_config(argv: list[str]) -> None:
    run, modules = _probe(*argv)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"astuner {kernel_version()}\n"
    loaded = sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_LOADED))
    assert not loaded


def test_the_probe_sees_the_app_being_built_and_what_loads_before() -> None:
    run, modules = _probe("--help")
    assert run.returncode != 0
    assert "make_app was called" in run.stderr
    assert {"astuner.logs", "structlog"} <= modules  # `--help` sets up logging before it builds the app


@pytest.mark.parametrize(
    ("argv", "asked"),
    [
        (["--version"], True),
        (["--verbose", "--version"], True),
        (["--version", "--help"], True),
        (["--help", "--version"], False),
        (["run", "--version"], False),
        (["--conf", "x.yaml", "--version"], False),
        ([], False),
    ],
)
def test_version_is_asked_only_among_the_leading_root_flags(argv: list[str], asked: bool) -> None:
    assert asks_version(argv) is asked
