"""What can fail before a run's folder exists fails before it: once, naming the key, leaving nothing behind.

The first cases run the real command line (`python -m astuner run --backbone debug`); then what is
checked follows what the command uses (`RunUses`): a fine-tuning reads no tasks and generates nothing,
a run that does not validate reads no validation file, remote workers load the model themselves.
"""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from astuner import hookimpl
from astuner.cli import make_app
from astuner.components import RunUses, preflight, run_uses
from astuner.config import AstunerConfig, load_config
from astuner.default_plugins.debug_backbone import DebugBackbone
from astuner.errors import ConfigError
from astuner.plugins import Plugins
from astuner.rollout.progress import PROGRESS_ENV
from astuner.testing.backbones import EndingBackbone, EndSettings, only_run, run_ending
from astuner.testing.cli import run_astuner


def _refused(workdir: Path, conf: Path, *overrides: str) -> str:
    """Stderr of a run that must fail before its folder: exit 1, one error, no launcher_record/."""
    args = [arg for override in overrides for arg in ("-o", override)]
    result = run_astuner("run", "--conf", str(conf), "--backbone", "debug", *args, cwd=workdir)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.count("error:") == 1, result.stderr
    assert "run failed" not in result.stdout + result.stderr
    assert not (workdir / "launcher_record").exists()
    return result.stderr


def test_a_missing_data_file_is_named_with_where_it_was_looked_for(write_config, workdir: Path) -> None:
    conf = write_config({"task_reader": {"type": "jsonl", "jsonl": {"training_file": "data/train.jsonl"}}})
    error = _refused(workdir, conf)
    assert "task_reader.jsonl.training_file" in error
    assert str(workdir / "data" / "train.jsonl") in error


def test_an_engine_that_is_not_installed_is_named_with_its_key(write_config, workdir: Path) -> None:
    error = _refused(workdir, write_config({}), "rollout.engine=nosuch")
    assert "rollout.engine, from the command line" in error and "'nosuch'" in error


def test_a_wrong_progress_interval_is_refused_before_the_folder(write_config, workdir: Path) -> None:
    conf, wrong = str(write_config({})), {PROGRESS_ENV: "soon"}
    result = run_astuner("run", "--conf", conf, "--backbone", "debug", cwd=workdir, env=wrong)
    assert result.returncode == 1 and result.stderr.count("error:") == 1, result.stdout + result.stderr
    assert f"{PROGRESS_ENV}='soon'" in result.stderr
    assert not (workdir / "launcher_record").exists()


def test_a_run_that_fails_at_once_points_to_no_records_folder_it_never_wrote(
    write_config, workdir: Path
) -> None:
    (workdir / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    conf = write_config({"task_reader": {"type": "jsonl", "jsonl": {"training_file": "train.jsonl"}}})
    result = run_astuner("run", "--conf", str(conf), "--backbone", "debug", cwd=workdir)
    assert result.returncode == 1 and "validation_file is not set" in result.stderr
    (folder,) = (workdir / "launcher_record").glob("*/*")
    assert "run failed" in result.stdout and "  why:" in result.stdout
    assert "rollouts/" not in result.stdout and not (folder / "rollouts").exists()


def test_a_finished_run_gives_no_reason_for_ending(plugins: Plugins, write_config, workdir: Path) -> None:
    plugins.add(
        SimpleNamespace(
            register_backbones=hookimpl(
                lambda register: register("ending", EndingBackbone, settings=EndSettings)
            )
        ),
        name="ending",
    )
    result = run_ending(make_app(plugins), write_config({}, name="done.yaml"))
    assert result.exit_code == 0, result.output
    assert "reason=None" not in result.output
    log = (only_run(workdir, "done") / "astuner.log").read_text()
    (ended,) = [e for e in map(json.loads, log.splitlines()) if e["event"] == "run finished"]
    assert "reason" not in ended


def test_the_run_folders_config_finds_the_data_of_the_config_it_started_from(
    plugins: Plugins, write_config, workdir: Path
) -> None:
    """`astuner eval --conf <run>/config.yaml` (a closing line) reads the files the run read: a
    relative path saved as written would be taken from the run folder."""
    from astuner.components import build_reader
    from astuner.config import load_config

    (workdir / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    block = {"task_reader": {"type": "jsonl", "jsonl": {"training_file": "train.jsonl"}}}
    plugins.add(
        SimpleNamespace(
            register_backbones=hookimpl(
                lambda register: register("ending", EndingBackbone, settings=EndSettings)
            )
        ),
        name="ending",
    )
    result = run_ending(make_app(plugins), write_config(block, name="saved.yaml"))
    assert result.exit_code == 0, result.output
    saved = load_config(only_run(workdir, "saved") / "config.yaml", for_training=False, plugins=plugins)
    (task,) = build_reader(saved, plugins).read("train")
    assert task.main_query == "1+1"


# What a command does decides what is checked: `RunUses`, as the command or the backbone says.
FINE_TUNING = RunUses(splits=frozenset(), workflow=False, engine=False, model="here")
ROW = '{"question": "1+1", "answer": "2"}\n'


def _config_of(write_config, block: dict, *overrides: str) -> AstunerConfig:
    return load_config(write_config(block), list(overrides), environ={})


def test_a_command_that_generates_nothing_is_not_refused_for_the_reader_workflow_or_engine(
    write_config, plugins: Plugins
) -> None:
    """`astuner sft` reads `--from`: a GPU config's vllm engine, its data files, its workflow are not its."""
    config = _config_of(
        write_config,
        {
            "task_reader": {"type": "jsonl", "jsonl": {"training_file": "gone.jsonl"}},
            "rollout": {"agentscope_workflow": "nowhere_mod->flow", "engine": "vllm"},
        },
    )
    preflight(config, plugins, FINE_TUNING)
    with pytest.raises(ConfigError, match=re.escape("task_reader.jsonl.training_file")):
        preflight(config, plugins)  # a run uses them all


def test_a_command_that_loads_the_model_here_checks_its_path_whatever_the_engine(
    write_config, plugins: Plugins
) -> None:
    config = _config_of(write_config, {"rollout": {"engine": "vllm"}}, "model.path=./models/nope")
    with pytest.raises(ConfigError, match=re.escape("model.path: local path './models/nope'")):
        preflight(config, plugins, FINE_TUNING)


def test_a_split_the_run_does_not_read_is_not_checked(write_config, workdir: Path, plugins: Plugins) -> None:
    (workdir / "train.jsonl").write_text(ROW)
    files = {"training_file": "train.jsonl", "validation_file": "not_yet.jsonl"}
    config = _config_of(write_config, {"task_reader": {"type": "jsonl", "jsonl": files}})
    preflight(config, plugins, RunUses(splits=frozenset({"train"})))
    with pytest.raises(ConfigError, match=re.escape("task_reader.jsonl.validation_file")):
        preflight(config, plugins, RunUses(splits=frozenset({"train", "validation"})))


def test_a_model_that_remote_workers_load_is_not_looked_for_here(write_config, plugins: Plugins) -> None:
    config = _config_of(write_config, {}, "model.path=/gpu-node/models/qwen", "rollout.engine=transformers")
    plugins = _with_transformers(plugins)
    preflight(config, plugins, RunUses(engine=False, model="elsewhere"))
    with pytest.raises(ConfigError, match=re.escape("model.path: local path '/gpu-node/models/qwen'")):
        preflight(config, plugins)


def test_the_debug_backbone_reads_the_split_it_looks_at_and_the_training_file(
    write_config, plugins: Plugins
) -> None:
    config = _config_of(write_config, {}, "debug.split=train")
    assert DebugBackbone().run_uses(config).splits == {"train"}
    assert run_uses(DebugBackbone(), load_config(None, environ={})).splits == {"train", "validation"}
    assert run_uses(object(), config) == RunUses()  # a backbone that says nothing: everything is checked


def _with_transformers(plugins: Plugins) -> Plugins:
    """`plugins` with a stand-in `transformers` engine, the one that loads model.path from this disk."""
    plugins.add(
        SimpleNamespace(register_engines=hookimpl(lambda register: register("transformers", object))),
        name="stand_in_transformers",
    )
    return plugins


class _OldStyleSettings(BaseModel):
    """A third-party reader's settings written before `check_before_run` was given the splits."""

    def check_before_run(self) -> None:
        raise ConfigError("task_reader.old_style: its own check ran")


def test_a_check_before_run_that_takes_no_splits_still_runs(write_config, plugins: Plugins) -> None:
    plugins.add(
        SimpleNamespace(
            register_readers=hookimpl(
                lambda register: register("old_style", object, settings=_OldStyleSettings)
            )
        ),
        name="old_style_reader",
    )
    config = _config_of(write_config, {"task_reader": {"type": "old_style"}})
    with pytest.raises(ConfigError, match="its own check ran"):  # not a TypeError about its arguments
        preflight(config, plugins)
