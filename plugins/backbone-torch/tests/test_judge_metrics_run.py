"""What a judge reports in `JudgeOutput.metrics` reaches a torch run's metrics.jsonl as the mean
over the step's rollouts (`train/judge/<name>`) and over a validation's (`val/judge/<name>`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from astuner.record import read_trajectories
from astuner.testing.cli import run_astuner

pytest.importorskip("torch")

# The tiny model writes noise: the verdict depends on the sampled text's length, so some runs of a
# group pass and some fail, and one metric is reported by the failing runs only.
FLOWS = """
from astuner import JudgeOutput, WorkflowOutput


async def one_call(task, model):
    call = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=call.content, metrics={"reply_tokens": len(call.response_ids)})


async def even_length(task, response):
    even = len(response or "") % 2 == 0
    metrics = {"even": even, "judge/chars": float(len(response or ""))}
    if not even:
        metrics["odd_only"] = 1.0
    return JudgeOutput(reward=1.0 if even else 0.0, is_success=even, metrics=metrics)
"""


def mean_of(trajectories: list, name: str) -> float:
    values = [float(t.metrics[name]) for t in trajectories if t.error is None and name in t.metrics]
    return sum(values) / len(values)


def test_one_step_writes_the_judges_means_for_training_and_validation(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    (tmp_path / "judged.py").write_text(FLOWS, encoding="utf-8")
    block = {
        "experiment_name": "judged",
        "model": {"path": str(tiny_model_dir)},
        "task_reader": {"type": "arith", "arith": {"train_size": 4, "validation_size": 2}},
        "task_judge": {"judge_protocol": "judged->even_length"},
        "data": {"train_batch_size": 2},
        "rollout": {
            "agentscope_workflow": "judged->one_call",
            "num_repeat": 4,
            "temperature": 1.0,
            "max_response_length_in_one_turn": 8,
            "val_kwargs": {"temperature": 1.0, "num_repeat": 2},
        },
        "trainer_common": {"total_training_steps": 1, "save_freq": 5, "test_freq": 1, "seed": 3},
        "torch": {"train_dtype": "float32", "num_threads": 1},
    }
    (tmp_path / "judged.yaml").write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    result = run_astuner("run", "--conf", "judged.yaml", "--backbone", "torch", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "launcher_record" / "judged").iterdir()
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for split, rollouts in (("train", "step_1.jsonl"), ("val", "val_step_1.jsonl")):
        trajectories = read_trajectories(run / "rollouts" / rollouts)
        for name, key in (("even", "even"), ("judge/chars", "chars"), ("reply_tokens", "reply_tokens")):
            assert row[f"{split}/judge/{key}"] == pytest.approx(mean_of(trajectories, name)), (split, key)
        assert row[f"{split}/judge/even"] == pytest.approx(row[f"{split}/success_rate"])
        if any("odd_only" in t.metrics for t in trajectories):
            assert row[f"{split}/judge/odd_only"] == 1.0  # over the runs that report it, not all of them
    assert "train/judge/judge/chars" not in row
