"""docs/readers.md: its example config, data, commands, tables and quoted error hold for the real readers.

The page states what the `jsonl` reader yields for its example files (a
`<!-- yields: CONFIG -->` block); here the same config is loaded and read
through the reader the kernel builds, so a change to the reader or the page
that makes them disagree fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from astuner.components import build_reader
from astuner.config import load_config
from astuner.default_plugins.arith_reader import ArithReaderSettings
from astuner.default_plugins.jsonl_reader import JsonlReaderSettings
from astuner.errors import ConfigError
from astuner.plugins import Plugins

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "readers.md"
MARKED = re.compile(r"<!-- ([^>]+?) -->\n```(\w*)\n(.*?)```", re.DOTALL)


def marked(kind: str) -> list[tuple[str, str]]:
    """(marker argument, body) of each fenced block whose marker starts with `kind`."""
    return [
        (marker.removeprefix(kind).strip(), body)
        for marker, _, body in MARKED.findall(PAGE.read_text())
        if marker.startswith(kind)
    ]


def settings_table(heading: str) -> dict[str, tuple[str, str]]:
    """{key: (default, meaning)} of the first `| key | default | meaning |` table after `heading`."""
    text = PAGE.read_text()
    section = text[text.index(heading) :]
    table = section[section.index("| key | default | meaning |") :].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        key, default, meaning = (cell.strip() for cell in line.strip("|").split("|", 2))
        rows[key.strip("`")] = (default.strip("`"), meaning)
    return rows


def _plugins() -> Plugins:
    return Plugins(load_entry_points=False)


def _tasks(config_path: Path) -> list[dict[str, Any]]:
    config = load_config(config_path, environ={}, for_training=False)
    reader = build_reader(config, _plugins())
    return [
        {"split": split, **task.model_dump(exclude={"env_type"})}
        for split in ("train", "validation")
        for task in reader.read(split)
    ]


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory other than the config's folder: the page's paths hold from anywhere."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_page_is_linked_from_the_readme() -> None:
    assert "(docs/readers.md)" in (REPO / "README.md").read_text()


def test_quoted_example_files_equal_the_files() -> None:
    spec = importlib.util.spec_from_file_location("docs_snippets", REPO / "docs" / "snippets.py")
    assert spec and spec.loader
    snippets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(snippets)
    text = PAGE.read_text()
    assert text.count("<!-- snippet: docs/reader_examples/") == 3
    assert snippets.render(text) == text, "run: python docs/snippets.py"


def test_every_code_block_is_tested() -> None:
    """Each fence: a quoted file, a command run here, the yielded tasks, the quoted error, the arith block."""
    text = PAGE.read_text()
    fences = re.findall(r"^```\w*\n", text, re.MULTILINE)[::2]  # opening fences: every other one
    kinds = ("snippet: ", "tested: run", "tested: arith", "yields: ", "quoted error: ")
    checked = [m for m, _, _ in MARKED.findall(text) if m.startswith(kinds)]
    assert len(fences) == len(checked) == 7


@pytest.mark.usefixtures("elsewhere")
def test_the_example_yields_the_tasks_the_page_lists() -> None:
    ((config, body),) = marked("yields: ")
    stated = [json.loads(line) for line in body.strip().splitlines()]
    assert _tasks(REPO / config) == stated
    # the cases the prose explains are in the list
    ids = {t["task_id"] for t in stated}
    assert {"train-3", "101"} <= ids and "hint" in stated[1]["metadata"]


def test_a_missing_validation_file_stops_with_the_quoted_error(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "docs/reader_examples/qa.yaml").read_text())
    settings = config["astuner"]["task_reader"]["jsonl"]
    del settings["validation_file"]
    settings["training_file"] = str(REPO / "docs/reader_examples" / settings["training_file"])
    path = tmp_path / "no_validation.yaml"
    path.write_text(yaml.safe_dump(config))
    reader = build_reader(load_config(path, environ={}, for_training=False), _plugins())
    assert len(list(reader.read("train"))) == 2
    ((_, quoted),) = marked("quoted error: ")
    with pytest.raises(ConfigError) as raised:
        list(reader.read("validation"))
    assert str(raised.value) == quoted.strip()


def _defaults(model: type[BaseModel]) -> dict[str, str]:
    out = {}
    for name, field in model.model_fields.items():
        default = field.default
        out[name] = "null" if default is None else str(default)
    return out


def test_the_settings_tables_list_every_key_with_its_default() -> None:
    for heading, model in (
        ("## Reader `jsonl`", JsonlReaderSettings),
        ("## Reader `arith`", ArithReaderSettings),
    ):
        table = settings_table(heading)
        assert {key: default for key, (default, _) in table.items()} == _defaults(model), heading


def test_the_arith_block_loads_and_yields_what_the_page_says(tmp_path: Path) -> None:
    ((_, body),) = marked("tested: arith")
    path = tmp_path / "arith.yaml"
    path.write_text(
        yaml.safe_dump({"astuner": {**yaml.safe_load(body), "task_judge": {"judge_protocol": "exact"}}})
    )
    reader = build_reader(load_config(path, environ={}, for_training=False), _plugins())
    first = next(iter(reader.read("train")))
    assert first.task_id == "arith-train-00000" and "arith-train-00000" in PAGE.read_text()
    assert next(iter(reader.read("validation"))).task_id == "arith-validation-00000"
    assert set(first.metadata) == {"answer", "expression"}
    assert isinstance(first.answer, str) and first.answer.lstrip("-").isdigit()


def test_the_page_s_commands_run_and_show_its_tasks() -> None:
    ((_, body),) = marked("tested: run")
    commands = [line[2:] for line in body.splitlines() if line.startswith("$ ")]
    assert len(commands) == 3
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    assert commands[0] == "cd docs/reader_examples"
    script = " && ".join(commands)  # one shell, as typed one after another
    result = subprocess.run(
        script, shell=True, cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"$ {script}\n{result.stdout}\n{result.stderr}"
    train, validation = result.stdout.split("jsonl · validation")
    assert "capital-fr" in train and "train-3" in train and "101" in validation


def test_relative_paths_are_taken_from_where_the_page_says(elsewhere: Path) -> None:
    """A config in a sub-folder naming `t.jsonl` beside it, read from the folder above."""
    (elsewhere / "project").mkdir()
    (elsewhere / "project" / "t.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    config = elsewhere / "project" / "conf.yaml"
    settings = {"type": "jsonl", "jsonl": {"training_file": "t.jsonl"}}
    config.write_text(yaml.safe_dump({"astuner": {"task_reader": settings}}))
    reader = build_reader(load_config(config, environ={}, for_training=False), _plugins())
    ((stated,),) = [re.findall(r"<!-- paths -->(.*?)<!-- /paths -->", PAGE.read_text(), re.DOTALL)]
    stated = " ".join(stated.split())
    try:
        found = len(list(reader.read("train"))) == 1
    except ConfigError:
        found = False
    assert found == (
        stated == "Relative paths written in a config file are taken from the config file's folder"
    )
