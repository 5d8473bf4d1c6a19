"""examples/tune_api/train_math.py: the AgentScope-Tuner-style script trains SmolLM2 on GSM8K via tune()."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from astuner.record import read_trajectories
from astuner.rollout.workflow import adapt_workflow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "tune_api" / "train_math.py"
GSM8K = REPO.parent / "shared" / "data" / "gsm8k"
needs_gsm8k = pytest.mark.skipif(
    not (GSM8K / "train.jsonl").is_file(),
    reason=f"the GSM8K copy is not at {GSM8K} (../shared/data/gsm8k beside the repository)",
)


@pytest.fixture(scope="module")
def train_math() -> ModuleType:
    """The script imported as a module: its functions, without running `tune()`."""
    spec = importlib.util.spec_from_file_location("tune_api_train_math", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_finds_the_gsm8k_copy_from_its_own_folder(train_math: ModuleType) -> None:
    assert train_math.GSM8K.resolve() == GSM8K.resolve()


def test_the_judge_rewards_the_gsm8k_answer(train_math: ModuleType) -> None:
    task = {"question": "How many clips?", "answer": "48 + 24 = <<48+24=72>>72\n#### 72"}
    right = asyncio.run(train_math.math_judge(task, "So she sold \\boxed{72} clips."))
    wrong = asyncio.run(train_math.math_judge(task, "She sold \\boxed{70} clips."))
    assert (right.reward, right.is_success) == (1.0, True)
    assert (wrong.reward, wrong.is_success) == (0.0, False)
    assert asyncio.run(train_math.math_judge(task, None)).reward == 0.0
    adapt_workflow(train_math.math_workflow, "train_math")  # the tutorial's function form


@pytest.mark.slow
@pytest.mark.timeout(2400)
@needs_gsm8k
def test_the_script_trains_two_steps_on_cpu_and_prints_a_loadable_checkpoint(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    env["ASTUNER__EXPERIMENT_DIR"] = str(tmp_path / "records")
    result = subprocess.run(
        [sys.executable, "examples/tune_api/train_math.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=2300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    printed = result.stdout.strip().splitlines()[-1]
    assert printed.startswith("checkpoint: ")
    checkpoint = Path(printed.removeprefix("checkpoint: "))
    (run,) = (tmp_path / "records" / "math_workflow").iterdir()
    assert checkpoint == run / "checkpoints" / "step_2"
    assert AutoModelForCausalLM.from_pretrained(checkpoint).num_parameters() > 100_000_000  # SmolLM2-135M

    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all("actor/loss" in r and "train/reward_mean" in r for r in records)
    saved = yaml.safe_load((run / "config.yaml").read_text())["astuner"]
    assert saved["rollout"]["agentscope_workflow"] == "tune/__main__.math_workflow"
    assert saved["task_judge"]["judge_protocol"] == "tune/__main__.math_judge"
    assert (saved["rollout"]["num_repeat"], saved["data"]["train_batch_size"]) == (4, 4)
    assert saved["model"]["path"] == "builtin:smollm2-135m-instruct"
    for step in (1, 2):
        trajectories = read_trajectories(run / "rollouts" / f"step_{step}.jsonl")
        assert len(trajectories) == 16  # 4 GSM8K problems x 4 runs
        for trajectory in trajectories:
            assert trajectory.error is None, trajectory.error
            # judged by math_judge; a run stopped by the `nonsense` check gets the madness reward
            assert trajectory.reward in ({-1.0} if trajectory.madness else {0.0, 1.0})
            assert trajectory.calls and all(len(c.response_ids) <= 64 for c in trajectory.calls)
