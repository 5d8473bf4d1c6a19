"""A relative path in a config file is taken from the file's folder; one given on the command line or
in Python, from the working directory; a missing file's error says which, and the path it looked at."""

from pathlib import Path

import pytest
import yaml

from astuner.components import plugin_settings, preflight
from astuner.config import load_config
from astuner.default_plugins.jsonl_reader import JsonlReader
from astuner.errors import ConfigError
from astuner.plugins import Plugins
from astuner.testing.cli import run_astuner

ROW = '{"question": "1+1", "answer": "2"}\n'


def _config_beside_data(root: Path, block: dict) -> Path:
    """`root/cfg/conf.yaml` holding `block`, with `root/cfg/data/train.jsonl` beside it."""
    (root / "cfg" / "data").mkdir(parents=True)
    (root / "cfg" / "data" / "train.jsonl").write_text(ROW)
    conf = root / "cfg" / "conf.yaml"
    conf.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return conf


def _jsonl(**files: str) -> dict:
    return {"task_reader": {"type": "jsonl", "jsonl": files}}


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory that is not the config's folder."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_a_data_file_beside_the_config_is_found_from_another_working_directory(
    tmp_path: Path, elsewhere: Path, plugins: Plugins
) -> None:
    conf = _config_beside_data(tmp_path, _jsonl(training_file="data/train.jsonl"))
    settings = plugin_settings(load_config(conf, environ={}), plugins.get("reader", "jsonl"))
    (task,) = JsonlReader(settings).read("train")
    assert task.main_query == "1+1"
    assert settings.training_file == tmp_path / "cfg" / "data" / "train.jsonl"


def test_the_command_line_reads_the_data_beside_the_config(tmp_path: Path, elsewhere: Path) -> None:
    conf = _config_beside_data(tmp_path, _jsonl(training_file="data/train.jsonl"))
    result = run_astuner("data", "preview", "--conf", str(conf), "--split", "train", cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert "1+1" in result.stdout


def test_a_missing_file_names_the_config_folder_and_the_path_looked_at(
    tmp_path: Path, elsewhere: Path, plugins: Plugins
) -> None:
    conf = _config_beside_data(tmp_path, _jsonl(training_file="data/nope.jsonl"))
    with pytest.raises(ConfigError) as refused:
        preflight(load_config(conf, environ={}), plugins)
    base = tmp_path / "cfg"
    assert (
        f"task_reader.jsonl.training_file: file 'data/nope.jsonl' (relative to {base}/) does not exist: "
        f"looked at {base / 'data' / 'nope.jsonl'}"
    ) in str(refused.value)


def test_an_override_stays_relative_to_the_working_directory(
    tmp_path: Path, elsewhere: Path, plugins: Plugins
) -> None:
    conf = _config_beside_data(tmp_path, _jsonl(training_file="data/train.jsonl"))
    (elsewhere / "mine.jsonl").write_text(ROW)
    config = load_config(conf, ["task_reader.jsonl.training_file=mine.jsonl"], environ={})
    assert plugin_settings(config, plugins.get("reader", "jsonl")).training_file == elsewhere / "mine.jsonl"
    missing = load_config(conf, ["task_reader.jsonl.validation_file=gone.jsonl"], environ={})
    with pytest.raises(ConfigError, match=f"relative to {elsewhere}/\\) does not exist: looked at"):
        list(JsonlReader(plugin_settings(missing, plugins.get("reader", "jsonl"))).read("validation"))


def test_python_arguments_and_the_environment_stay_relative_to_the_working_directory(
    tmp_path: Path, elsewhere: Path, plugins: Plugins
) -> None:
    conf = _config_beside_data(tmp_path, {})
    config = load_config(conf, environ={}, arguments=_jsonl(training_file="a.jsonl"))
    assert plugin_settings(config, plugins.get("reader", "jsonl")).training_file == elsewhere / "a.jsonl"
    env = {"ASTUNER__TASK_READER__JSONL__TRAINING_FILE": "b.jsonl"}
    config = load_config(conf, environ=env)
    assert plugin_settings(config, plugins.get("reader", "jsonl")).training_file == elsewhere / "b.jsonl"


def test_a_local_model_folder_is_taken_from_the_config_folder_and_a_hub_id_is_kept(
    tmp_path: Path, elsewhere: Path
) -> None:
    conf = _config_beside_data(tmp_path, {"model": {"path": "./models/mine"}})
    config = load_config(conf, environ={})
    assert config.model.path == str(tmp_path / "cfg" / "models" / "mine")
    assert "'./models/mine' (relative to" in config.origins.origin_of("model.path")
    assert load_config(conf, ["model.path=Qwen/Qwen2.5-0.5B"], environ={}).model.path == "Qwen/Qwen2.5-0.5B"
    assert load_config(conf, ["model.path=./m"], environ={}).model.path == "./m"


def test_a_missing_model_folder_names_the_config_folder(
    tmp_path: Path, elsewhere: Path, plugins: Plugins
) -> None:
    conf = _config_beside_data(tmp_path, {"model": {"path": "../weights/qwen"}})
    with pytest.raises(ConfigError) as refused:
        preflight(load_config(conf, environ={}), _with_transformers(plugins))
    assert (
        f"model.path: local path '../weights/qwen' (relative to {tmp_path / 'cfg'}/) does not exist: "
        f"looked at {tmp_path / 'weights' / 'qwen'}"
    ) in str(refused.value)


def _with_transformers(plugins: Plugins) -> Plugins:
    """`plugins` with a stand-in `transformers` engine, the one that loads model.path from this disk."""
    from types import SimpleNamespace

    from astuner import hookimpl

    plugins.add(
        SimpleNamespace(register_engines=hookimpl(lambda register: register("transformers", object))),
        name="stand_in_transformers",
    )
    return plugins
