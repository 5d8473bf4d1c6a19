"""docs/write-a-plugin.md is what docs/plugin_docs.py writes, and every example it quotes works.

Each example plugin in docs/plugin_examples/ is added to a fresh plugin
manager (entry points off) and used the way astuner uses it: the reader,
workflow, engine, executor, judge, madness check, notifier and companion
together in debug runs; the backbone in a run of its own; the command from
the command line.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from typer.testing import CliRunner

from astuner import api
from astuner.cli import make_app
from astuner.config import load_config
from astuner.plugins import Plugins
from astuner.record import read_trajectories

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "plugin_examples"


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return load(REPO / "docs" / "plugin_docs.py", "docs_plugin_docs")


@pytest.fixture
def example_plugins() -> Plugins:
    """The kernel's defaults plus every example plugin, each under its file's name."""
    plugins = Plugins(load_entry_points=False)
    for path in sorted(EXAMPLES.glob("*.py")):
        plugins.add(load(path, f"plugin_example_{path.stem}"), name=path.stem)
    return plugins


def test_the_page_is_what_the_generator_writes(generator: ModuleType) -> None:
    assert generator.render() == generator.PAGE.read_text(encoding="utf-8"), "run: python docs/plugin_docs.py"


def test_check_reports_a_stale_page_and_writing_fixes_it(
    generator: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "docs" / "write-a-plugin.md"
    page.parent.mkdir()
    page.write_text("# an old page\n")
    monkeypatch.setattr(generator, "PAGE", page)
    monkeypatch.setattr(sys, "argv", ["plugin_docs.py", "--check"])
    assert generator.main() == 1
    assert page.read_text() == "# an old page\n"
    monkeypatch.setattr(sys, "argv", ["plugin_docs.py"])
    assert generator.main() == 0
    assert page.read_text() == generator.render()
    monkeypatch.setattr(sys, "argv", ["plugin_docs.py", "--check"])
    assert generator.main() == 0


def test_a_hook_without_an_example_stops_the_generator(
    generator: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generator, "REPO", tmp_path)
    monkeypatch.setattr(generator, "EXAMPLES", tmp_path)
    with pytest.raises(FileNotFoundError, match="the hook register_readers has no example"):
        generator.render()


def test_every_hook_has_one_example_that_implements_it_alone(
    generator: ModuleType, example_plugins: Plugins
) -> None:
    hooks = [name for name, _ in generator.hooks()]
    assert "register_judges" in hooks and "register_commands" in hooks
    assert sorted(path.stem for path in EXAMPLES.glob("*.py")) == sorted(hooks)
    examples = {info.name: info for info in example_plugins.infos() if info.name in hooks}
    assert sorted(examples) == sorted(hooks)
    for name, info in examples.items():
        assert info.status == "ok", info.error
        assert info.hooks == [name]


# The examples that compose a training step or open a run may use the second public module too.
COMPOSING_EXAMPLES = {"register_backbones", "register_executors", "register_commands"}


def test_examples_import_from_the_kernel_only_its_public_modules() -> None:
    for path in sorted(EXAMPLES.glob("*.py")):
        public = {"astuner.api", "astuner.training"} if path.stem in COMPOSING_EXAMPLES else {"astuner.api"}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            for module in modules:
                assert module.split(".")[0] != "astuner" or module in public, (path.name, module)


def test_every_api_name_and_hook_has_its_section(generator: ModuleType) -> None:
    page = generator.PAGE.read_text(encoding="utf-8")
    for name in api.__all__:
        assert page.count(f"#### `{name}`") == 1, name
    for name, _ in generator.hooks():
        assert page.count(f"### `{name}(") == 1, name
    assert " at 0x" not in page


def write_conf(folder: Path) -> Path:
    conf = folder / "examples.yaml"
    block = {
        "experiment_name": "examples",
        "model": {"path": "builtin:smollm2-135m-instruct"},
        "task_reader": {"type": "capitals"},
        "task_judge": {"judge_protocol": "short_answer", "short_answer": {"max_chars": 20}},
        "rollout": {
            "agentscope_workflow": "ask_once",
            "engine": "canned",
            "engines": {"canned": {"reply": "Nairobi"}},
            "executor": "timed",
            "compute_madness_checklist": ["shouting"],
        },
        "debug": {"debug_first_n_tasks": 1, "num_repeat": 2},
        "notify": {"log_file": {"path": str(folder / "runs.log")}},
    }
    conf.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return conf


def newest_run(folder: Path) -> Path:
    return sorted((folder / "launcher_record" / "examples").iterdir())[-1]


def test_the_examples_work_together_in_debug_runs(example_plugins: Plugins, workdir: Path) -> None:
    conf = write_conf(workdir)
    app = make_app(example_plugins)
    run = ["run", "--conf", str(conf), "--backbone", "debug", "--with-stopwatch", "lap"]
    result = CliRunner().invoke(app, run)
    assert result.exit_code == 0, result.output
    folder = newest_run(workdir)
    trajectories = read_trajectories(folder / "rollouts" / "debug.jsonl")
    assert [t.task_id for t in trajectories] == ["Kenya", "Kenya"]
    for t in trajectories:
        assert t.error is None, t.error
        assert t.calls[0].content == "Nairobi" and t.calls[0].response_ids
        assert t.reward == 1.0 and t.madness == []
        assert t.metrics["workflow_wall_s"] > 0
    assert (folder / "stopwatch.txt").read_text().startswith("lap: ")
    (line,) = (workdir / "runs.log").read_text().splitlines()
    assert line.startswith("astuner run examples finished")

    shouted = CliRunner().invoke(app, [*run, "-o", "rollout.engines.canned.reply=NAIROBI, OF COURSE!"])
    assert shouted.exit_code == 0, shouted.output
    trajectories = read_trajectories(newest_run(workdir) / "rollouts" / "debug.jsonl")
    for t in trajectories:
        assert t.madness == ["shouting: the reply is mostly capital letters"]
        assert t.reward == load_config(conf).rollout.agent_madness_reward
    assert len((workdir / "runs.log").read_text().splitlines()) == 2


def test_the_example_backbone_and_command_run_from_the_command_line(
    example_plugins: Plugins, workdir: Path
) -> None:
    conf = write_conf(workdir)
    app = make_app(example_plugins)
    counted = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "count_tasks"])
    assert counted.exit_code == 0, counted.output
    counts = json.loads((newest_run(workdir) / "task_counts.json").read_text())
    assert counts == {"train": 2, "validation": 1}
    where = CliRunner().invoke(app, ["where", "--conf", str(conf), "-o", "experiment_name=other"])
    assert where.exit_code == 0, where.output
    assert where.stdout.strip() == "launcher_record/other"
