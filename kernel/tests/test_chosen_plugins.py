"""A key that chooses a missing plugin is refused by every command that loads the config, naming the key."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from astuner.cli import make_app
from astuner.plugins import Plugins

COMMANDS = [["config", "show"], ["run", "--backbone", "debug"]]


@pytest.mark.parametrize("command", COMMANDS, ids=["config show", "run"])
@pytest.mark.parametrize(
    ("block", "key", "name"),
    [
        ({"task_reader": {"type": "dataset_file"}}, "task_reader.type", "No reader named 'dataset_file'"),
        ({"task_judge": {"judge_protocol": "mathh"}}, "task_judge.judge_protocol", "No judge named 'mathh'"),
    ],
)
def test_config_show_refuses_a_missing_plugin_as_run_does(
    plugins: Plugins, write_config, workdir: Path, command: list[str], block: dict, key: str, name: str
) -> None:
    # `task_reader.type: dataset_file` is an old name; `config show` printed it as fine, `run` refused it
    conf = write_config(block)
    result = CliRunner().invoke(make_app(plugins), [*command, "--conf", str(conf)])
    assert result.exit_code != 0, result.output
    assert f"{key}, from config file '{conf}' (line 3): {name}. Installed:" in result.stderr
    assert not (workdir / "launcher_record").exists()
