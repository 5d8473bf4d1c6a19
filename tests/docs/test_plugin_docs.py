"""docs/write-a-plugin.md and docs/write-a-backbone.md are what docs/plugin_docs.py writes.

Every name of `astuner.api` and `astuner.training` has its section, and
every `astuner.api` name an example. Each example plugin in
docs/plugin_examples/ is added to a fresh plugin manager (entry points off)
and used the way astuner uses it: the reader, workflow, engine, executor,
judge, madness check, notifier and companion together in debug runs; the
backbone in a run of its own; the command from the command line. The
backbone page's sketch runs one step on them.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from typer.testing import CliRunner

from astuner import api, training
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


def test_the_pages_are_what_the_generator_writes(generator: ModuleType) -> None:
    pages = generator.pages()
    assert sorted(path.name for path in pages) == ["write-a-backbone.md", "write-a-plugin.md"]
    for path, page in pages.items():
        assert page == path.read_text(encoding="utf-8"), (
            f"{path.name} is stale: run python docs/plugin_docs.py"
        )


def test_check_reports_stale_pages_and_writing_fixes_them(
    generator: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin_page = tmp_path / "docs" / "write-a-plugin.md"
    plugin_page.parent.mkdir()
    plugin_page.write_text("# an old page\n")
    backbone_page = tmp_path / "docs" / "write-a-backbone.md"  # not written yet
    monkeypatch.setattr(generator, "PLUGIN_PAGE", plugin_page)
    monkeypatch.setattr(generator, "BACKBONE_PAGE", backbone_page)
    monkeypatch.setattr(sys, "argv", ["plugin_docs.py", "--check"])
    assert generator.main() == 1
    assert "write-a-plugin.md is stale" in capsys.readouterr().err
    assert plugin_page.read_text() == "# an old page\n" and not backbone_page.exists()
    monkeypatch.setattr(sys, "argv", ["plugin_docs.py"])
    assert generator.main() == 0
    assert plugin_page.read_text() == generator.render_plugin_page()
    assert backbone_page.read_text() == generator.render_backbone_page()
    backbone_page.write_text("# edited by hand\n")
    monkeypatch.setattr(sys, "argv", ["plugin_docs.py", "--check"])
    assert generator.main() == 1
    err = capsys.readouterr().err
    assert "write-a-backbone.md is stale" in err and "write-a-plugin.md" not in err
    monkeypatch.setattr(sys, "argv", ["plugin_docs.py"])
    assert generator.main() == 0
    monkeypatch.setattr(sys, "argv", ["plugin_docs.py", "--check"])
    assert generator.main() == 0


def test_a_hook_without_an_example_stops_the_generator(
    generator: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(generator, "REPO", tmp_path)
    monkeypatch.setattr(generator, "EXAMPLES", tmp_path)
    with pytest.raises(FileNotFoundError, match="the hook register_readers has no example"):
        generator.render_plugin_page()


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


def test_every_public_name_and_hook_has_its_section(generator: ModuleType) -> None:
    plugin_page = generator.PLUGIN_PAGE.read_text(encoding="utf-8")
    backbone_page = generator.BACKBONE_PAGE.read_text(encoding="utf-8")
    for module, page in ((api, plugin_page), (training, backbone_page)):
        assert page.count(f"## `{module.__name__}`") == 1
        for name in module.__all__:
            assert page.count(f"#### `{name}`") == 1, (module.__name__, name)
    for name, _ in generator.hooks():
        assert plugin_page.count(f"### `{name}(") == 1, name
    for page in (plugin_page, backbone_page):
        assert " at 0x" not in page


def test_a_constant_is_documented_by_the_string_under_it(generator: ModuleType) -> None:
    settings_of = generator.describe(api, "SettingsOf")
    assert "The `settings_of` service" in settings_of
    assert "SettingsOf = collections.abc.Callable" in settings_of


def test_every_api_name_has_an_example(generator: ModuleType) -> None:
    missing = generator.names_without_example()
    assert not missing, (
        "astuner.api names with no example: use each in docs/plugin_examples/ or show it in a "
        f"```python block or >>> lines of its docstring: {', '.join(missing)}"
    )


def test_only_example_code_counts_as_an_example(
    generator: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = "Mentions Task in prose.\n\n```python\nreader = CapitalsReader()\n```\n\n>>> Split\n... Judge\n"
    code = generator.docstring_code(doc)
    assert "CapitalsReader" in code and "Split" in code and "Judge" in code and "Task" not in code
    assert generator.example_uses()["Split"] == ["register_readers"]
    monkeypatch.setattr(generator, "EXAMPLES", tmp_path)  # no example plugins: their names lack examples
    missing = generator.names_without_example()
    assert "Split" in missing and "Workflow" in missing
    assert "hookimpl" in missing  # pluggy's marker has no docstring of ours


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


def test_the_backbone_page_sketch_runs_one_step(
    generator: ModuleType, example_plugins: Plugins, workdir: Path
) -> None:
    (code,) = re.findall(r"```python\n(.*?)```", generator.BACKBONE_INTRO, re.DOTALL)
    sketch = ModuleType("backbone_page_sketch")
    exec(compile(code, "write-a-backbone.md", "exec"), sketch.__dict__)

    @api.hookimpl
    def register_backbones(register: api.Register) -> None:
        register("one_step", sketch.OneStep)

    holder = ModuleType("backbone_page_plugin")
    holder.register_backbones = register_backbones  # type: ignore[attr-defined]
    example_plugins.add(holder, name="backbone_page_plugin")
    conf = write_conf(workdir)
    result = CliRunner().invoke(
        make_app(example_plugins), ["run", "--conf", str(conf), "--backbone", "one_step"]
    )
    assert result.exit_code == 0, result.output
    folder = newest_run(workdir)
    trajectories = read_trajectories(folder / "rollouts" / "step_1.jsonl")
    repeat = load_config(conf).rollout.num_repeat
    assert sorted(t.task_id for t in trajectories) == sorted(["France", "Japan"] * repeat)
    (row,) = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and row["train/reward_mean"] == 1.0
    assert row["train/samples"] == len(trajectories)  # one single-call sample per trajectory
