"""`astuner init NAME`: a project folder from a template that runs with `--backbone debug` at once.

`astuner init --plugin NAME`: a plugin package that installs, registers its judge and passes its own tests.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from astuner.cli import make_app
from astuner.companions import free_port
from astuner.components import build_judge
from astuner.config import load_config
from astuner.core.task import Task, WorkflowOutput
from astuner.errors import AstunerError
from astuner.plugins import Plugins
from astuner.record import read_trajectories
from astuner.rollout.judging import load_judge
from astuner.rollout.workflow import load_workflow
from astuner.scaffold import TEMPLATES, check_name, check_plugin_name
from astuner.testing.cli import run_astuner

REPO = Path(__file__).resolve().parents[3]
PLUGIN_FILES = [
    "README.md",
    "pyproject.toml",
    "src/astuner_demo_judge/__init__.py",
    "tests/conftest.py",
    "tests/test_demo_judge.py",
]
FILES = {
    "math": ["README.md", "{n}.yaml", "{n}_judge.py", "{n}_workflow.py"],
    "openai": ["README.md", "{n}.yaml", "{n}_judge.py", "{n}_workflow.py"],
    "env": ["README.md", "{n}.yaml", "{n}_workflow.py"],
}


def readme_debug_command(folder: Path) -> list[str]:
    """The one `astuner run ... --backbone debug` line the generated README gives."""
    (line,) = [
        line
        for line in (folder / "README.md").read_text().splitlines()
        if line.startswith("astuner run --conf") and "--backbone debug" in line
    ]
    return line.split()[1:]


def test_every_template_is_tested() -> None:
    assert set(FILES) == set(TEMPLATES)


@pytest.mark.parametrize("template", sorted(FILES))
def test_scaffold_names_files_after_the_project_and_loads(
    template: str, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"proj_{template}"
    result = CliRunner().invoke(make_app(Plugins()), ["init", name, "--template", template])
    assert result.exit_code == 0, result.output
    folder = workdir / name
    assert sorted(p.name for p in folder.iterdir()) == [f.format(n=name) for f in FILES[template]]
    for path in folder.iterdir():
        text = path.read_text()
        assert "${" not in text and "NAME" not in text, path
    assert f"astuner run --conf {name}/{name}.yaml --backbone debug" in result.stdout
    # Import strings resolve from the config's folder, wherever the command runs.
    monkeypatch.chdir(workdir.parent)
    config = load_config(folder / f"{name}.yaml")
    assert config.experiment_name == name
    assert config.model.path == "builtin:smollm2-135m-instruct"
    plugins = Plugins()
    assert load_workflow(config.rollout.agentscope_workflow, plugins, config.search_paths()) is not None
    judge = load_judge(
        config.task_judge.judge_protocol,
        plugins,
        config.search_paths(),
        build_registered=partial(build_judge, config, plugins),
        judge_config=config,
    )
    assert judge is not None


# The tool each template's agent offers; a 135M model writes no call without a worked example.
TEMPLATE_TOOLS = {"math": "calculate", "openai": "submit_answer"}


@pytest.mark.parametrize("template", sorted(TEMPLATE_TOOLS))
def test_templates_with_a_tool_show_the_model_a_call_of_it(template: str, workdir: Path) -> None:
    name = f"demo_{template}"
    result = CliRunner().invoke(make_app(Plugins()), ["init", name, "--template", template])
    assert result.exit_code == 0, result.output
    config = load_config(workdir / name / f"{name}.yaml")
    called = [
        call["function"]["name"]
        for message in config.model.tool_demonstration
        for call in message.get("tool_calls") or []
    ]
    tool = TEMPLATE_TOOLS[template]
    assert len(called) == 2 and set(called) == {tool}
    assert f"{tool}" in (workdir / name / f"{name}_workflow.py").read_text()
    answered = [m for m in config.model.tool_demonstration if m["role"] == "tool"]
    assert [m["name"] for m in answered] == [tool, tool]


def test_names_that_are_not_identifiers_or_are_keywords_are_refused() -> None:
    for bad in ("class", "a" * 65, "", "with space"):
        with pytest.raises(AstunerError, match="project"):
            check_name(bad)
    check_name("my_agent2")


def test_an_empty_existing_folder_is_filled_and_dir_is_made(workdir: Path) -> None:
    (workdir / "empty").mkdir()
    app = make_app(Plugins(load_entry_points=False))
    assert CliRunner().invoke(app, ["init", "empty"]).exit_code == 0
    assert (workdir / "empty" / "empty.yaml").is_file()
    result = CliRunner().invoke(app, ["init", "nested", "--dir", "a/b"])
    assert result.exit_code == 0, result.output
    assert (workdir / "a" / "b" / "nested" / "nested_workflow.py").is_file()
    assert "astuner run --conf a/b/nested/nested.yaml --backbone debug" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["1demo", "my-agent"])
def test_a_bad_name_is_a_clear_error(bad: str, tmp_path: Path) -> None:
    result = run_astuner("init", bad, cwd=tmp_path)
    assert result.returncode == 1
    assert f"'{bad}' cannot name a project" in result.stderr and "Python identifier" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_init_refuses_to_overwrite_a_folder_with_files(tmp_path: Path) -> None:
    assert run_astuner("init", "demo", cwd=tmp_path).returncode == 0
    workflow = tmp_path / "demo" / "demo_workflow.py"
    workflow.write_text("# my edits\n")
    result = run_astuner("init", "demo", "--template", "openai", cwd=tmp_path)
    assert result.returncode == 1
    assert "already exists and is not empty" in result.stderr and "never overwrites" in result.stderr
    assert workflow.read_text() == "# my edits\n"
    assert "async def judge(task" in (tmp_path / "demo" / "demo_judge.py").read_text()  # still math's


@pytest.mark.slow
@pytest.mark.parametrize("template", ["math", "openai"])
def test_config_show_and_data_preview_work_on_the_scaffold(template: str, tmp_path: Path) -> None:
    assert run_astuner("init", "proj", "--template", template, cwd=tmp_path).returncode == 0
    shown = run_astuner("config", "show", "--conf", "proj/proj.yaml", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "agentscope_workflow: proj_workflow->" in shown.stdout
    preview = run_astuner("data", "preview", "--conf", "proj/proj.yaml", "-n", "2", cwd=tmp_path)
    assert preview.returncode == 0, preview.stderr
    assert "arith-train-00001" in preview.stdout


@pytest.mark.slow
@pytest.mark.parametrize("template", sorted(FILES))
def test_the_readme_command_runs_the_scaffold_with_the_debug_backbone(
    template: str, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The generated README's exact command, on the tiny model (and a free port for the environment)."""
    assert run_astuner("init", "proj", "--template", template, cwd=tmp_path).returncode == 0
    command = [*readme_debug_command(tmp_path / "proj"), "-o", f"model.path={tiny_model_dir}"]
    if template == "env":
        assert "--with-env" in command
        command += ["-o", f"task_reader.env_service.env_url=http://127.0.0.1:{free_port()}"]
    result = run_astuner(*command, cwd=tmp_path, timeout=280)
    assert result.returncode == 0, result.stderr
    config = load_config(tmp_path / "proj" / "proj.yaml")
    (rollout_file,) = (tmp_path / "launcher_record" / "proj").glob("*/rollouts/debug.jsonl")
    trajectories = read_trajectories(rollout_file)
    assert len(trajectories) == config.debug.debug_first_n_tasks * config.debug.num_repeat
    for t in trajectories:
        assert t.error is None, t.error
        assert isinstance(t.reward, float) and t.calls and t.calls[0].response_ids
    if template == "env":
        assert all(t.metadata["env_steps"] for t in trajectories)


@pytest.mark.slow
def test_templates_ship_in_the_wheel(tmp_path: Path) -> None:
    """A non-editable install (the built wheel) finds its templates as package data."""
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO / "kernel")],
        check=True,
        timeout=240,
    )
    (wheel,) = wheels.glob("astuner-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=240
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    env["PYTHONPATH"] = str(target)
    script = "import astuner, sys; from astuner.cli import main; print(astuner.__file__); sys.argv[1:] = "
    result = subprocess.run(
        [sys.executable, "-c", script + "['init', 'shipped', '--template', 'env']; main()"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(str(target))
    assert re.search(r"env_type: guess_number", (tmp_path / "shipped" / "shipped.yaml").read_text())


def import_generated(folder: Path, module: str) -> ModuleType:
    """The generated package's module, imported from its src/ without touching sys.path or sys.modules."""
    spec = importlib.util.spec_from_file_location(module, folder / "src" / module / "__init__.py")
    assert spec and spec.loader
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def test_init_plugin_writes_a_package_whose_judge_a_config_picks(workdir: Path) -> None:
    result = CliRunner().invoke(
        make_app(Plugins(load_entry_points=False)), ["init", "--plugin", "demo_judge"]
    )
    assert result.exit_code == 0, result.output
    assert "pip install -e './astuner-demo-judge[test]'" in result.stdout
    folder = workdir / "astuner-demo-judge"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == PLUGIN_FILES
    for path in folder.rglob("*.*"):
        assert "NAME" not in path.read_text(), path
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((folder / "pyproject.toml").read_text())
    assert project["project"]["name"] == "astuner-demo-judge"
    assert "astuner" in project["project"]["dependencies"]
    assert project["project"]["entry-points"]["astuner"] == {"demo_judge": "astuner_demo_judge"}
    assert project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/astuner_demo_judge"]

    # From the kernel, the package's code imports astuner.api only; its tests build a plugin manager too.
    def kernel_imports(files: list[Path]) -> set[str]:
        nodes = [node for path in files for node in ast.walk(ast.parse(path.read_text()))]
        imported = {node.module for node in nodes if isinstance(node, ast.ImportFrom)}
        return {m for m in imported if m and m.split(".")[0] == "astuner"}

    assert kernel_imports(list((folder / "src").rglob("*.py"))) == {"astuner.api"}
    assert kernel_imports(list((folder / "tests").rglob("*.py"))) == {"astuner.api", "astuner.training"}

    module = import_generated(folder, "astuner_demo_judge")
    plugins = Plugins(load_entry_points=False)
    plugins.add(module, name="demo_judge")
    (workdir / "conf.yaml").write_text(
        "astuner:\n  task_judge:\n    judge_protocol: demo_judge\n    demo_judge: {answer_field: city}\n"
    )
    judge = build_judge(load_config(workdir / "conf.yaml"), plugins)
    task = Task(task_id="t", metadata={"city": "Paris", "answer": "Lyon"})
    verdict = asyncio.run(judge.judge(task, WorkflowOutput(response="It is Paris.")))
    assert verdict.reward == 1.0 and verdict.is_success
    # The README's table of keys is the settings model's fields.
    keys = re.findall(r"^\| `(\w+)` \|", (folder / "README.md").read_text(), re.MULTILINE)
    assert keys == list(module.ContainsAnswerSettings.model_fields)


def test_plugin_names_must_make_a_module_and_a_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for bad in ("Demo", "1judge", "my-judge", "a__b", "trailing_", "class", "x" * 33, ""):
        with pytest.raises(AstunerError, match="cannot name a plugin"):
            check_plugin_name(bad)
    with pytest.raises(AstunerError, match="Leave the 'astuner' prefix out"):
        check_plugin_name("astuner_judge")
    (tmp_path / "astuner_taken_name.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        AstunerError, match=r"astuner_taken_name is already installed.*pip uninstall astuner-taken-name"
    ):
        check_plugin_name("taken_name")
    check_plugin_name("my_judge2")


def test_init_plugin_refuses_a_used_folder_and_a_template(workdir: Path) -> None:
    app = make_app(Plugins(load_entry_points=False))
    (workdir / "astuner-demo-judge").mkdir()
    (workdir / "astuner-demo-judge" / "notes.txt").write_text("mine\n")
    used = CliRunner().invoke(app, ["init", "--plugin", "demo_judge"])
    assert used.exit_code == 1 and "already exists and is not empty" in used.output
    assert [p.name for p in (workdir / "astuner-demo-judge").iterdir()] == ["notes.txt"]
    both = CliRunner().invoke(app, ["init", "--plugin", "other_judge", "--template", "math"])
    assert both.exit_code == 1 and "--template picks a project template" in both.output
    assert not (workdir / "astuner-other-judge").exists()
    made = CliRunner().invoke(app, ["init", "--plugin", "other_judge", "--dir", "plugins"])
    assert made.exit_code == 0, made.output
    assert (workdir / "plugins" / "astuner-other-judge" / "tests" / "test_other_judge.py").is_file()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_generated_plugin_installs_lints_and_passes_its_own_tests(tmp_path: Path) -> None:
    """pip builds and installs it (into a folder of its own, not this environment); astuner finds it."""
    name = "judge_" + "x" * 26  # the longest name: the template keeps its lines within the line length
    created = run_astuner("init", "--plugin", name, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    folder = tmp_path / ("astuner-" + name.replace("_", "-"))
    for ruff in (["check", "--no-cache", "."], ["format", "--no-cache", "--check", "."]):
        linted = subprocess.run(
            [sys.executable, "-m", "ruff", *ruff], cwd=folder, capture_output=True, text=True
        )
        assert linted.returncode == 0, linted.stdout + linted.stderr

    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps"]
    subprocess.run(
        [*pip, "--no-build-isolation", "--target", str(site), str(folder)], check=True, timeout=240
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    env["PYTHONPATH"] = str(site)
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "7 passed" in tests.stdout
    listed = run_astuner("plugins", "list", "--json", cwd=tmp_path, env={"PYTHONPATH": str(site)})
    assert listed.returncode == 0, listed.stderr
    (row,) = [row for row in json.loads(listed.stdout) if row["name"] == name]
    assert row["distribution"] == folder.name and row["version"] == "0.1.0"
    assert row["status"] == "ok" and row["provides"] == [f"judge:{name}"]
