"""What can fail before a run's folder exists fails before it: once, naming the key, leaving nothing behind.

Each case runs the real command line (`python -m astuner run --backbone debug`).
"""

import json
from pathlib import Path
from types import SimpleNamespace

from astuner import hookimpl
from astuner.cli import make_app
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
