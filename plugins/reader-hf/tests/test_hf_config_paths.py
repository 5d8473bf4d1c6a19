"""A local dataset folder written relative in a config file is found beside the file, from any folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from astuner_reader_hf.reader import HfReader

from astuner.components import build_reader
from astuner.config import load_config
from astuner.errors import ConfigError


def _conf(root: Path, dataset_path: str) -> Path:
    """`root/cfg/conf.yaml` reading `dataset_path`, with a two-split jsonl folder at `root/cfg/data/qa`."""
    data = root / "cfg" / "data" / "qa"
    data.mkdir(parents=True)
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text(f'{{"question": "{split} q", "answer": "1"}}\n')
    block = {
        "task_reader": {
            "type": "huggingface_dat_repo",
            "huggingface_dat_repo": {"dataset_path": dataset_path},
        }
    }
    conf = root / "cfg" / "conf.yaml"
    conf.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return conf


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def _reader(conf: Path, *overrides: str) -> HfReader:
    from astuner.plugins import Plugins

    return build_reader(load_config(conf, list(overrides), environ={}), Plugins())


@pytest.mark.parametrize("written", ["data/qa", "./data/qa"])
def test_a_folder_beside_the_config_is_read_from_another_working_directory(
    tmp_path: Path, elsewhere: Path, written: str
) -> None:
    (task,) = _reader(_conf(tmp_path, written)).read("train")
    assert task.main_query == "train q"


def test_a_missing_folder_names_where_it_looked_and_a_hub_id_is_kept(tmp_path: Path, elsewhere: Path) -> None:
    conf = _conf(tmp_path, "./data/gone")
    with pytest.raises(ConfigError, match=f"does not exist: looked at {tmp_path / 'cfg'}/"):
        list(_reader(conf).read("train"))
    assert (
        _reader(conf, "task_reader.huggingface_dat_repo.dataset_path=org/name").settings.dataset_path
        == "org/name"
    )


def test_an_override_stays_relative_to_the_working_directory(tmp_path: Path, elsewhere: Path) -> None:
    conf = _conf(tmp_path, "data/qa")
    override = "task_reader.huggingface_dat_repo.dataset_path=./data/qa"
    with pytest.raises(ConfigError, match=f"looked at {elsewhere}/data/qa"):
        list(_reader(conf, override).read("train"))
