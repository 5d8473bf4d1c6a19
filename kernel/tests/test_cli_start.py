"""`astuner --version` and `--help` load only what they need.

A fresh `python -m astuner` runs under a probe that reports the modules
loaded at exit. `--version` (with typer's app forbidden: `make_app` raises)
loads neither the plugin manager, any plugin, the config models nor
logging; `--help` with the kernel's own plugins loads no config machinery,
rollout stack, web server or HTTP client: those load when a command runs. What is
checked is what got imported, not how long it took, so the tests hold on a
loaded machine.
"""

from __future__ import annotations

import json
import os
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

if "--version" in sys.argv:
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
NOT_LOADED_BY_HELP = (
    "astuner.config",
    "astuner.components",
    "astuner.launch",
    "astuner.record",
    "astuner.notify",
    "astuner.rollout.stack",
    "astuner.rollout.runner",
    "fastapi",
    "uvicorn",
    "httpx",
    "yaml",
)


def _probe(
    *argv: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
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


def test_help_lists_the_commands_without_loading_what_they_run() -> None:
    # The kernel's own plugins only: what an installed plugin imports is that plugin's business.
    run, modules = _probe("--help", env={"ASTUNER_LOAD_PLUGINS": "none"})
    assert run.returncode == 0, run.stderr
    assert "Commands:" in run.stdout and "init" in run.stdout
    assert {"astuner.plugins", "astuner.lifecycle", "astuner.default_plugins.debug_backbone"} <= modules
    loaded = sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_LOADED_BY_HELP))
    assert not loaded


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
