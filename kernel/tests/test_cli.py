import json
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from astuner import hookimpl
from astuner.cli import _State, handle_user_errors, make_app, normalise_argv
from astuner.plugins import Plugins
from astuner.protocols import RunContext


class RecordingSettings(BaseModel):
    flavour: str = "plain"


class RecordingBackbone:
    """A backbone that remembers what it was handed."""

    runs: ClassVar[list[RunContext]] = []

    def __init__(self, settings: RecordingSettings) -> None:
        self.settings = settings

    def run(self, ctx: RunContext) -> None:
        RecordingBackbone.runs.append(ctx)

    def engine_config(self, config, plugins) -> dict:
        return {"engine": {"flavour": self.settings.flavour, "temperature": config.rollout.temperature}}


@pytest.fixture
def app_with_backbone(plugins: Plugins):
    def register_backbones(register):
        register("recorder", RecordingBackbone, settings=RecordingSettings)

    plugins.add(SimpleNamespace(register_backbones=hookimpl(register_backbones)), name="test_backbone")
    RecordingBackbone.runs = []
    return make_app(plugins)


def invoke(app, *args: str):
    return CliRunner().invoke(app, list(args))


def test_run_reaches_the_backbone_with_the_merged_config(
    app_with_backbone, write_config, monkeypatch
) -> None:
    path = write_config({"rollout": {"temperature": 0.5, "num_repeat": 2}, "recorder": {"flavour": "spicy"}})
    monkeypatch.setenv("ASTUNER__ROLLOUT__NUM_REPEAT", "3")
    result = invoke(
        app_with_backbone,
        "run",
        "--conf",
        str(path),
        "--backbone",
        "recorder",
        "-o",
        "rollout.temperature=0.7",
    )
    assert result.exit_code == 0, result.output
    (ctx,) = RecordingBackbone.runs
    assert ctx.config.rollout.temperature == 0.7
    assert ctx.config.rollout.num_repeat == 3
    assert ctx.config.backbone == "recorder"
    folder = ctx.experiment.path
    assert folder.parent == Path("launcher_record") / "conf"
    saved = folder / "config.yaml"
    assert "temperature: 0.7" in saved.read_text()
    log_lines = [json.loads(line) for line in (folder / "astuner.log").read_text().splitlines()]
    assert [line["event"] for line in log_lines] == ["run started", "run finished"]
    assert log_lines[0]["backbone"] == "recorder"


def test_config_show_prints_config_and_engine_config(app_with_backbone, write_config) -> None:
    path = write_config({"recorder": {"flavour": "mild"}})
    result = invoke(app_with_backbone, "config", "show", "--conf", str(path), "--backbone", "recorder")
    assert result.exit_code == 0, result.output
    assert "astuner:" in result.stdout
    assert "flavour: mild" in result.stdout
    assert "# engine config for backbone 'recorder'" in result.stdout


def test_plugins_list_table_and_json(plugins: Plugins) -> None:
    app = make_app(plugins)
    table = invoke(app, "plugins", "list")
    assert table.exit_code == 0
    for text in ("arith_reader", "reader:arith", "judge:exact", "register_readers", "astuner"):
        assert text in table.stdout
    rows = json.loads(invoke(app, "plugins", "list", "--json").stdout)
    by_name = {row["name"]: row for row in rows}
    assert by_name["exact_judge"]["provides"] == ["judge:exact"]
    assert by_name["exact_judge"]["status"] == "ok"


def test_data_preview_arith_and_jsonl(plugins: Plugins, write_config, workdir: Path) -> None:
    app = make_app(plugins)
    arith = write_config({"task_reader": {"type": "arith"}}, name="arith.yaml")
    result = invoke(app, "data", "preview", "--conf", str(arith), "-n", "2")
    assert result.exit_code == 0, result.output
    assert "arith-train-00000" in result.stdout and "arith-train-00001" in result.stdout
    assert "arith-train-00002" not in result.stdout

    (workdir / "val.jsonl").write_text(json.dumps({"question": "What is 6*7?", "answer": "42"}) + "\n")
    jsonl = write_config(
        {"task_reader": {"type": "jsonl", "jsonl": {"validation_file": "val.jsonl"}}}, name="jsonl.yaml"
    )
    result = invoke(app, "data", "preview", "--conf", str(jsonl), "--split", "validation")
    assert result.exit_code == 0, result.output
    assert "What is 6*7?" in result.stdout and "42" in result.stdout


@pytest.mark.parametrize(
    ("block", "args", "expected"),
    [
        ({"rollout": {"temprature": 1}}, [], "Did you mean 'rollout.temperature'?"),
        ({"rollout": {"temperature": "hot"}}, [], "Invalid value for 'rollout.temperature'"),
        ({}, ["--backbone", "nope"], "No backbone named 'nope'. Installed: debug, recorder."),
        ({"task_judge": {"judge_protocol": "exakt"}}, ["--backbone", "recorder"], "Did you mean 'exact'?"),
        (
            {"rollout": {"agentscope_workflow": "missing_flow_mod->Flow"}},
            ["--backbone", "recorder"],
            "Cannot import module 'missing_flow_mod'",
        ),
        (
            {"task_judge": {"judge_protocol": "missing_mod->Judge"}},
            ["--backbone", "recorder"],
            "Cannot import module 'missing_mod'",
        ),
    ],
)
def test_bad_input_is_one_paragraph_without_traceback(
    app_with_backbone, write_config, block, args, expected
) -> None:
    path = write_config(block)
    result = invoke(app_with_backbone, "run", "--conf", str(path), *args)
    assert result.exit_code == 1
    assert expected in result.stderr
    assert "Traceback" not in result.output
    assert result.stderr.strip().startswith("error:")
    assert RecordingBackbone.runs == []
    assert not Path("launcher_record").exists()  # a rejected config leaves no run folder behind


@pytest.mark.parametrize("flag", ["--with-logview", "--keep-logview"])
def test_the_log_viewer_flags_without_its_plugin_say_how_to_install_it(
    app_with_backbone, write_config, flag: str
) -> None:
    result = invoke(app_with_backbone, "run", "--conf", str(write_config({})), "--backbone", "recorder", flag)
    assert result.exit_code == 1
    assert "pip install astuner-logview" in result.stderr and "./plugins/logview" in result.stderr
    assert RecordingBackbone.runs == []
    assert not Path("launcher_record").exists()


@pytest.mark.parametrize(("command", "folder"), [("eval", "eval"), ("logview", "logview")])
def test_a_plugin_command_without_its_plugin_names_the_plugin(
    plugins: Plugins, command: str, folder: str
) -> None:
    app = make_app(plugins)
    for args in ([command, "--conf", "x.yaml", "-k", "2"], [command, "--help"]):
        result = invoke(app, *args)
        assert result.exit_code == 1, args
        assert result.stderr.startswith(f"error: Command '{command}' comes with the plugin astuner-{command}")
        assert f"`pip install astuner-{command}`" in result.stderr and f"./plugins/{folder}" in result.stderr
    assert command not in invoke(app, "--help").stdout  # hidden: the help lists what is installed


def test_a_registered_plugin_command_is_not_shadowed(plugins: Plugins) -> None:
    def register_commands(cli):
        cli.command("eval")(lambda: print("the real eval"))

    plugins.add(SimpleNamespace(register_commands=hookimpl(register_commands)), name="evaluator")
    result = invoke(make_app(plugins), "eval")
    assert result.exit_code == 0 and result.stdout == "the real eval\n"


def test_a_logview_companion_must_serve_a_page(app_with_backbone, plugins: Plugins, write_config) -> None:
    @contextmanager
    def no_page(value, run_folder):
        yield object()

    def register_companions(register):
        register("logview", no_page)

    plugins.add(SimpleNamespace(register_companions=hookimpl(register_companions)), name="pageless")
    args = ["run", "--conf", str(write_config({})), "--backbone", "recorder", "--with-logview"]
    result = invoke(app_with_backbone, *args)
    assert result.exit_code == 1
    assert "Companion 'logview' of plugin pageless yields a 'object', which serves no page" in result.stderr
    assert RecordingBackbone.runs == []


def test_missing_config_file(plugins: Plugins, workdir: Path) -> None:
    result = invoke(make_app(plugins), "data", "preview", "--conf", "nope.yaml")
    assert result.exit_code == 1
    assert "Config file 'nope.yaml' does not exist" in result.stderr


def test_seed_spelling_without_a_sub_command() -> None:
    assert normalise_argv(["--conf", "x.yaml", "--backbone", "debug"]) == [
        "run",
        "--conf",
        "x.yaml",
        "--backbone",
        "debug",
    ]
    assert normalise_argv(["--conf=x.yaml"]) == ["run", "--conf=x.yaml"]
    assert normalise_argv(["plugins", "list"]) == ["plugins", "list"]
    # seed 004's launcher lines put other run options first
    seed = ["--with-appworld", "--conf", "x.yaml", "--with-ray", "--backbone=trinity"]
    assert normalise_argv(seed) == ["run", *seed]
    assert normalise_argv(["--db=TAG1|TAG2", "--conf=x.yaml"]) == ["run", "--db=TAG1|TAG2", "--conf=x.yaml"]
    for alone in (["--help"], ["--version"], ["--with-ray"]):
        assert normalise_argv(alone) == alone


def test_plugins_list_shows_brackets_in_errors_verbatim(plugins: Plugins) -> None:
    def register_judges(register):
        raise RuntimeError("install it with pip install 'pkg[engine]'")

    plugins.add(SimpleNamespace(register_judges=hookimpl(register_judges)), name="needs_extra")
    result = invoke(make_app(plugins), "plugins", "list")
    assert "pip install 'pkg[engine]'" in result.stdout


@pytest.mark.parametrize(
    ("command", "package"), [("sft", "backbone-torch"), ("envservice", "judge-envservice")]
)
def test_a_command_of_a_plugin_with_another_name_names_its_package(
    plugins: Plugins, command: str, package: str
) -> None:
    result = invoke(make_app(plugins), command, "--conf", "x.yaml")
    assert result.exit_code == 1
    assert f"Command '{command}' comes with the plugin astuner-{package}" in result.stderr
    assert f"`pip install astuner-{package}`" in result.stderr and f"./plugins/{package}" in result.stderr


@pytest.mark.parametrize("backbone", ["torch", "verl", "trinity"])
def test_a_backbone_of_this_repository_without_its_plugin_names_the_package(
    plugins: Plugins, write_config, backbone: str
) -> None:
    result = invoke(make_app(plugins), "run", "--conf", str(write_config({})), "--backbone", backbone)
    assert result.exit_code == 1
    assert f"pip install astuner-backbone-{backbone}`" in result.stderr, result.stderr
    assert not Path("launcher_record").exists()


def test_the_settings_block_of_a_backbone_not_installed_names_its_package(
    plugins: Plugins, write_config
) -> None:
    path = write_config({"torch": {"lr": 1.0e-5}})
    result = invoke(make_app(plugins), "config", "show", "--conf", str(path))
    assert result.exit_code == 1
    assert (
        "'torch' in config file" in result.stderr
        and "settings block of the backbone 'torch'" in result.stderr
    )
    assert "pip install astuner-backbone-torch`" in result.stderr
    assert "Unknown key" not in result.stderr


@pytest.mark.parametrize("verbose", [False, True])
def test_an_unexpected_error_offers_the_traceback_only_when_it_was_not_shown(
    plugins: Plugins, verbose: bool, monkeypatch
) -> None:
    def register_commands(cli):
        @cli.command("boom")
        @handle_user_errors
        def boom() -> None:
            raise RuntimeError("the disk is on fire")

    plugins.add(SimpleNamespace(register_commands=hookimpl(register_commands)), name="boomer")
    monkeypatch.setattr(_State, "verbose", False)
    result = invoke(make_app(plugins), *(["--verbose"] if verbose else []), "boom")
    assert result.exit_code == 1
    assert "error: RuntimeError: the disk is on fire" in result.stderr
    assert ("Traceback" in result.stderr) is verbose
    assert ("run with --verbose for the traceback" in result.stderr) is not verbose


def test_a_sub_command_of_a_plugin_without_its_plugin_names_the_package(plugins: Plugins) -> None:
    result = invoke(make_app(plugins), "data", "download", "some/dataset")
    assert result.exit_code == 1
    assert "Command 'data download' comes with the plugin astuner-reader-hf" in result.stderr
    assert "`pip install astuner-reader-hf`" in result.stderr and "./plugins/reader-hf" in result.stderr
