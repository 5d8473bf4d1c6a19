"""`astuner sft` loads the model without a rollout copy: nothing is generated, so the generation
dtype probe (tens of seconds on a CPU, `dtype_probe`) never runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

import astuner_backbone_torch.plugin as torch_plugin
import astuner_backbone_torch.policy as policy_module
from typer.testing import CliRunner

from astuner.cli import make_app


def test_sft_runs_no_generation_dtype_probe(
    plugins, workdir: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probed: list[object] = []
    monkeypatch.setattr(policy_module, "fastest_cpu_dtype", lambda model: probed.append(model))
    conf = workdir / "warm.yaml"
    block = {
        "experiment_name": "warm",
        "model": {"path": str(tiny_model_dir)},
        # gen_dtype auto is what asks the probe on a CPU, when a rollout copy is made
        "torch": {"train_dtype": "float32", "gen_dtype": "auto", "num_threads": 1, "sft": {"epochs": 1}},
    }
    conf.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    demos = workdir / "demos.jsonl"
    exchange = [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}]
    demos.write_text(json.dumps({"messages": exchange}) + "\n", encoding="utf-8")
    plugins.add(torch_plugin, name="backbone_torch")
    result = CliRunner().invoke(make_app(plugins), ["sft", "--conf", str(conf), "--from", str(demos)])
    assert result.exit_code == 0, result.output
    assert "sft finished after" in result.output
    assert probed == []
