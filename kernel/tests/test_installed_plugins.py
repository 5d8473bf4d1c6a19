"""Plugins installed with pip are discovered through entry points.

These tests `pip install -e` two throw-away plugin packages into the
running environment (one good, one whose import raises), drive the real
`astuner` executable, and uninstall both afterwards.
"""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from astuner.default_plugins import DEFAULT_PLUGINS
from astuner.testing.packages import plugin_package

pytestmark = pytest.mark.slow

ASTUNER = [sys.executable, "-m", "astuner"]

GOOD_PLUGIN = '''
from pathlib import Path

import typer

from astuner import JudgeOutput, hookimpl


class AlwaysOne:
    async def judge(self, task, output):
        return JudgeOutput(reward=1.0, is_success=True)


class Echo:
    def run(self, ctx):
        out = ctx.experiment.path / "echo.txt"
        out.write_text(f"{ctx.config.rollout.temperature} {ctx.config.task_reader.type}")


@hookimpl
def register_judges(register):
    register("always_one", AlwaysOne, summary="Reward 1, always.")


@hookimpl
def register_backbones(register):
    register("echo", Echo)


@hookimpl
def register_commands(cli):
    @cli.command()
    def hello(name: str = "world"):
        """Say hello."""
        typer.echo(f"hello {name}")
'''


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("plugins")
    good = plugin_package(
        root, "astuner-demo-plugin", "demo_plugin", GOOD_PLUGIN, version="1.2.3", entry="demo"
    )
    broken = plugin_package(
        root,
        "astuner-broken-plugin",
        "broken_plugin",
        "raise RuntimeError('broken on purpose')\n",
        version="0.0.1",
        entry="broken",
    )
    _pip("install", "--no-deps", "--no-build-isolation", "-e", str(good), "-e", str(broken))
    try:
        yield
    finally:
        _pip("uninstall", "-y", "astuner-demo-plugin", "astuner-broken-plugin")


def _astuner(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    environ.update(env)
    return subprocess.run(
        [*ASTUNER, *args], capture_output=True, text=True, cwd=cwd, env=environ, timeout=120
    )


def test_plugins_list_shows_installed_and_broken_plugins(installed: None) -> None:
    result = _astuner("plugins", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    demo = rows["demo"]
    assert demo["distribution"] == "astuner-demo-plugin"
    assert demo["version"] == "1.2.3"
    assert demo["provides"] == ["judge:always_one", "backbone:echo"]
    assert demo["hooks"] == ["register_backbones", "register_commands", "register_judges"]
    assert rows["broken"]["status"] == "import error"
    assert "RuntimeError: broken on purpose" in rows["broken"]["error"]
    assert rows["arith_reader"]["status"] == "ok"

    table = _astuner("plugins", "list")
    assert "astuner-demo-plugin" in table.stdout and "backbone:echo" in table.stdout
    assert "import error" in table.stdout


def test_seed_spelling_runs_an_installed_backbone(installed: None, tmp_path: Path) -> None:
    conf = tmp_path / "exp.yaml"
    conf.write_text("astuner:\n  rollout:\n    temperature: 0.2\n")
    result = _astuner(
        "--conf", str(conf), "--backbone", "echo", "-o", "rollout.temperature=0.3", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    (echo,) = (tmp_path / "launcher_record" / "exp").glob("*/echo.txt")
    assert echo.read_text() == "0.3 arith"


def test_plugin_commands_and_narrowing_with_env(installed: None) -> None:
    assert _astuner("hello", "--name", "tuner").stdout.strip() == "hello tuner"
    only_demo = {
        r["name"]
        for r in json.loads(_astuner("plugins", "list", "--json", ASTUNER_LOAD_PLUGINS="demo").stdout)
    }
    assert "demo" in only_demo and "broken" not in only_demo
    by_dist = {
        r["name"]
        for r in json.loads(
            _astuner("plugins", "list", "--json", ASTUNER_LOAD_PLUGINS="astuner-broken-plugin").stdout
        )
    }
    assert "broken" in by_dist and "demo" not in by_dist
    none = {
        r["name"] for r in json.loads(_astuner("plugins", "list", "--json", ASTUNER_LOAD_PLUGINS="").stdout)
    }
    assert none == {module.rsplit(".", 1)[-1] for module in DEFAULT_PLUGINS}


def test_help_is_fast_and_lists_plugin_commands(installed: None) -> None:
    result = _astuner("--help")
    assert result.returncode == 0
    assert "hello" in result.stdout and "plugins" in result.stdout
