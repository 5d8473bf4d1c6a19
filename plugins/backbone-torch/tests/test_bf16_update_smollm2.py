"""A bfloat16-autocast update of the real SmolLM2 keeps the trainer's log-probs near the engine's.

bfloat16 rounds every matmul: the trainer's log-probs of the sampled tokens
move away from the ones the engine sampled them with, and the update
becomes off-policy. One GRPO step of `astuner run` on SmolLM2 with
`torch.train_dtype: bfloat16` (and the engine decoding from a bfloat16 copy,
as auto picks on a CPU with AMX: the larger gap of the two engine dtypes)
must report that gap (`actor/logprob_gap`, `actor/rollout_logprob_gap`)
finite and under the health rules' thresholds, the ones a run warns at.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from astuner.core.metric_declarations import builtin_catalog
from astuner.testing.cli import run_astuner

pytest.importorskip("torch")

# One call per rollout; the reward depends on the reply so groups are not all equal (every sample
# trains anyway: torch.skip_zero_advantage is off below, so the gap is measured on all of them).
FLOWS = """
from astuner import JudgeOutput, WorkflowOutput


async def one_call(task, model):
    call = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=call.content)


async def by_length(task, response):
    even = len(response or "") % 2 == 0
    return JudgeOutput(reward=1.0 if even else 0.0, is_success=even)
"""


def threshold(key: str) -> float:
    """The value at which the health rule declared on `key` warns."""
    metric = builtin_catalog().lookup(key)
    assert metric is not None and metric.health is not None and metric.health.at_least is not None
    return metric.health.at_least


@pytest.mark.slow
def test_one_bf16_step_on_smollm2_keeps_the_logprob_gap_under_the_health_threshold(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS, encoding="utf-8")
    block = {
        "experiment_name": "bf16",
        "model": {"path": "builtin:smollm2-135m-instruct"},
        "task_reader": {"type": "arith", "arith": {"train_size": 2, "validation_size": 1}},
        "task_judge": {"judge_protocol": "flows->by_length"},
        "data": {"train_batch_size": 2},
        "rollout": {
            "agentscope_workflow": "flows->one_call",
            "num_repeat": 2,
            "temperature": 1.0,
            "max_response_length_in_one_turn": 32,
        },
        "trainer_common": {"total_training_steps": 1, "test_freq": 5, "seed": 5},
        "torch": {"train_dtype": "bfloat16", "gen_dtype": "bfloat16", "skip_zero_advantage": False},
    }
    (tmp_path / "bf16.yaml").write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    result = run_astuner("run", "--conf", "bf16.yaml", "--backbone", "torch", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "launcher_record" / "bf16").iterdir()
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert row["actor/tokens_trained"] > 0
    for key in ("actor/logprob_gap", "actor/rollout_logprob_gap"):
        assert math.isfinite(row[key]), (key, row[key])
        assert row[key] < threshold(key), (key, row[key])
