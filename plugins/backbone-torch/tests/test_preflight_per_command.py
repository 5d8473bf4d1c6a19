"""The checks before a run's folder follow what the command does (`astuner.training.RunUses`).

`astuner sft` reads its samples from `--from` and generates nothing: a GPU config's vllm engine, its
reader's data files and its workflow are not its business. A torch run that never validates reads no
validation file; it loads `model.path` itself, whatever engine rolls out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

import astuner_backbone_torch.plugin as torch_plugin
from astuner_backbone_torch.backbone import TorchBackbone
from typer.testing import CliRunner

from astuner.cli import make_app
from astuner.config import load_config


def test_sft_is_not_refused_for_what_only_a_run_uses(plugins, workdir: Path, tiny_model_dir: Path) -> None:
    conf = workdir / "gpu.yaml"
    block = {
        "experiment_name": "gpu",
        "model": {"path": str(tiny_model_dir)},
        "task_reader": {"type": "jsonl", "jsonl": {"training_file": "on_the_cluster/train.jsonl"}},
        "rollout": {"agentscope_workflow": "not_here_mod->Flow", "engine": "vllm"},
        "torch": {"train_dtype": "float32", "num_threads": 1, "sft": {"epochs": 1}},
    }
    conf.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    demos = workdir / "demos.jsonl"
    exchange = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}]
    demos.write_text(json.dumps({"messages": exchange}) + "\n", encoding="utf-8")
    plugins.add(torch_plugin, name="backbone_torch")  # and no engine vllm
    app = make_app(plugins)
    result = CliRunner().invoke(app, ["sft", "--conf", str(conf), "--from", str(demos)])
    assert result.exit_code == 0, result.output
    assert "sft finished after" in result.output
    missing = CliRunner().invoke(
        app, ["sft", "--conf", str(conf), "--from", str(demos), "-o", "model.path=./gone"]
    )
    assert missing.exit_code == 1 and "model.path: local path './gone'" in missing.output


@pytest.mark.parametrize(
    ("trainer", "splits"),
    [
        ({"total_training_steps": 3, "test_freq": 20}, {"train"}),
        ({"total_training_steps": 3, "test_freq": 20, "val_before_train": True}, {"train", "validation"}),
        ({"total_training_steps": 3, "test_freq": 3}, {"train", "validation"}),
        ({"total_epochs": 1, "test_freq": 20}, {"train", "validation"}),  # the step count follows the data
    ],
)
def test_a_torch_run_reads_the_validation_split_only_when_it_may_validate(
    write_config, trainer: dict, splits: set[str]
) -> None:
    config = load_config(write_config({"trainer_common": trainer}), environ={})
    uses = TorchBackbone().run_uses(config)
    assert uses.splits == splits and uses.model == "here"
