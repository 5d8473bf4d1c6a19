"""The math-agent tutorial: its configs, its (confined) Python tool, and a debug run on GSM8K with SmolLM2."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from astuner_logview.tokens import trajectory_view

from astuner.config import load_config
from astuner.core.merge import merge_trajectory
from astuner.record import read_trajectories
from astuner.testing.records import rollout_rows

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "math_agent"
GSM8K = REPO / ".." / "shared" / "data" / "gsm8k"
needs_gsm8k = pytest.mark.skipif(
    not (GSM8K / "test.jsonl").is_file(),
    reason=f"the GSM8K copy is not at {GSM8K} (../shared/data/gsm8k beside the repository)",
)


def astuner(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "astuner", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def workflow() -> ModuleType:
    spec = importlib.util.spec_from_file_location("math_agent_workflow", EXAMPLE / "workflow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_configs_load_side_by_side() -> None:
    gsm8k = load_config(EXAMPLE / "math_agent.yaml")
    arith = load_config(EXAMPLE / "math_agent_arith.yaml")
    assert gsm8k.task_reader.type == "huggingface_dat_repo"
    assert arith.task_reader.type == "arith"
    for config in (gsm8k, arith):
        assert config.task_judge.judge_protocol == "math_answer"
        assert config.rollout.agentscope_workflow == "workflow->MathAgentWorkflow"


@needs_gsm8k
def test_data_preview_shows_gsm8k_from_the_local_copy() -> None:
    result = astuner("data", "preview", "--conf", "examples/math_agent/math_agent.yaml", "-n", "2")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "huggingface_dat_repo · train" in text
    assert "Natalia sold clips to 48 of her friends" in text
    assert "#### 72" in text and "train-1" in text


def test_the_agent_gets_astuners_confined_python_tool(workflow: ModuleType) -> None:
    from agentscope.tool import Toolkit

    from astuner.rollout.unconfined_tool import is_unconfined_python_tool

    toolkit = Toolkit()
    toolkit.register_tool_function(workflow.execute_python_code)
    (schema,) = toolkit.get_json_schemas()
    assert schema["function"]["name"] == "execute_python_code"
    assert list(schema["function"]["parameters"]["properties"]) == ["code", "timeout"]  # as AgentScope's
    assert not is_unconfined_python_tool(schema)  # no "unconfined tool" warning for the tutorial
    assert workflow.execute_python_code.limits.effective_timeout(300) == 10  # the model asks; 10 s at most


def test_the_tool_runs_the_models_code(workflow: ModuleType) -> None:
    reply = asyncio.run(workflow.execute_python_code("print(6 * 7)"))
    assert reply.content[0]["text"] == "<returncode>0</returncode><stdout>42\n</stdout><stderr></stderr>"
    reply = asyncio.run(workflow.execute_python_code("import os; print(os.listdir(os.path.expanduser('~')))"))
    assert reply.content[0]["text"].startswith("<returncode>0</returncode><stdout>[")  # its own empty home


@pytest.mark.slow
@needs_gsm8k
def test_debug_run_on_gsm8k_with_smollm2(tmp_path: Path) -> None:
    """`astuner run --backbone debug` on the first two GSM8K test problems with the real SmolLM2."""
    result = astuner(
        "run",
        "--conf",
        "examples/math_agent/math_agent.yaml",
        "--backbone",
        "debug",
        "-o",
        "debug.debug_first_n_tasks=2",
        "-o",
        "rollout.max_response_length_in_one_turn=48",
        "-o",
        f"experiment_dir={tmp_path / 'records'}",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ test-")]
    assert [row.split("│")[1].strip() for row in rows] == ["test-0", "test-1"]
    for row in rows:
        assert row.split("│")[3].strip() in ("0.000", "1.000")  # the reward column
    (rollout_file,) = (tmp_path / "records").glob("math_agent/*/rollouts/debug.jsonl")
    lines = rollout_rows(rollout_file)
    # written as each rollout ends, so in finishing order
    assert sorted(line["task_id"] for line in lines) == ["test-0", "test-1"]
    for line in lines:
        assert line["error"] is None, line["error"]
        assert line["reward"] in (0.0, 1.0)
        assert "judge/rule_correct" in line["metrics"]  # judged by math_answer
        assert line["metadata"]["task"]["metadata"]["answer"].count("####") == 1
        for call in line["calls"]:
            assert call["prompt_ids"] and call["response_ids"]
            assert len(call["response_logprobs"]) == len(call["response_ids"]) <= 48
            assert all(lp <= 0 for lp in call["response_logprobs"])
    # loss masks come from merging the recorded calls, token-exactly, as training does
    for trajectory in read_trajectories(rollout_file):
        samples, _ = merge_trajectory(trajectory)
        assert samples
        generated = sum(len(call.response_ids) for call in trajectory.calls)
        assert sum(sum(sample.loss_mask) for sample in samples) == generated
        for sample in samples:
            assert len(sample.loss_mask) == len(sample.input_ids) == len(sample.old_logprobs)
            assert 0 < sum(sample.loss_mask) < len(sample.loss_mask)


@pytest.mark.slow
def test_the_agent_calls_its_tool_on_smollm2_and_the_viewer_shows_it(tmp_path: Path) -> None:
    """The example's tool demonstration makes the built-in model call the tool; the tool really runs."""
    result = astuner(
        "run",
        "--conf",
        "examples/math_agent/math_agent_arith.yaml",
        "--backbone",
        "debug",
        "-o",
        "debug.debug_first_n_tasks=2",
        "-o",
        "rollout.temperature=0",
        "-o",
        f"experiment_dir={tmp_path / 'records'}",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "tool format: hermes (the chat template renders none" in result.stderr
    (tool_use,) = [line for line in result.stderr.splitlines() if "tool use" in line]
    rate = float(tool_use.split("episodes_with_tool_call=")[1].split()[0])
    assert rate > 0, tool_use
    (rollout_file,) = (tmp_path / "records").glob("math_agent_arith/*/rollouts/debug.jsonl")
    executed = 0
    for trajectory in read_trajectories(rollout_file):
        assert trajectory.error is None, trajectory.error
        for call, after in zip(trajectory.calls, trajectory.calls[1:], strict=False):
            for tool_call in call.tool_calls:
                (answer,) = [m for m in after.messages if m.get("tool_call_id") == tool_call.id]
                assert answer["content"].startswith("<returncode>0</returncode><stdout>")  # the code ran
                executed += 1
        view = trajectory_view(trajectory, [trajectory], None, "grpo", 1.0)
        shown = [tc for turn in view["turns"] for tc in turn["response"]["tool_calls"]]
        assert len(shown) == sum(len(c.tool_calls) for c in trajectory.calls)
    assert executed > 0
