"""The math-agent tutorial: its configs, its confined Python tool, and a debug run on GSM8K with SmolLM2."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from astuner.config import load_config
from astuner.core.merge import merge_trajectory
from astuner.record import read_trajectories

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
def python_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("math_agent_python_tool", EXAMPLE / "python_tool.py")
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


def run_tool(python_tool: ModuleType, code: str, **limits: object) -> tuple[int, str, str]:
    return asyncio.run(python_tool.run_python(code, **limits))


def test_tool_runs_code_and_reports_errors(python_tool: ModuleType) -> None:
    assert run_tool(python_tool, "print(sum(range(10)))") == (0, "45\n", "")
    code, out, err = run_tool(python_tool, "1/0")
    assert code == 1 and "ZeroDivisionError" in err
    code, out, _ = run_tool(python_tool, "import os; print(' '.join(os.environ)); print(os.getcwd())")
    names, cwd = out.splitlines()
    assert set(names.split()) <= {"PATH", "HOME", "PYTHONUTF8", "PYTHONIOENCODING", "LC_CTYPE"}
    assert Path(cwd).parent.name.startswith("math-agent-python-")


def test_tool_stops_code_at_the_time_limit(python_tool: ModuleType) -> None:
    code, out, err = run_tool(python_tool, "print('start', flush=True)\nwhile True: pass", timeout_s=5)
    assert code == -1
    assert out == "start\n"  # what it printed before the limit comes back
    assert "ran longer than 5 s and was stopped" in err


def test_tool_stops_what_the_code_left_running(python_tool: ModuleType) -> None:
    code = "import subprocess; print(subprocess.Popen(['sleep', '60']).pid)"
    returncode, out, _ = run_tool(python_tool, code, timeout_s=30)
    assert returncode == 0
    stat = Path(f"/proc/{int(out)}/stat")

    def running() -> bool:  # gone, or a zombie its new parent has not reaped, counts as stopped
        with contextlib.suppress(FileNotFoundError):
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        return False

    deadline = time.monotonic() + 10  # SIGKILL was sent; let the kernel finish it
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running()


def test_tool_has_no_network_by_default(python_tool: ModuleType) -> None:
    dial = "import socket; socket.create_connection(('127.0.0.1', 9), timeout=2)"
    code, _, err = run_tool(python_tool, dial)
    assert code == 1 and "network access is disabled" in err
    # even below Python's socket wrapper, the process has no route anywhere
    raw = "import _socket; s = _socket.socket(); s.settimeout(2); s.connect(('1.1.1.1', 80))"
    code, _, err = run_tool(python_tool, raw)
    assert code == 1 and "OSError" in err


def test_tool_allows_loopback_network_when_asked(python_tool: ModuleType) -> None:
    listen = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
    connect = "socket.create_connection(s.getsockname(), timeout=2); print('connected')"
    assert run_tool(python_tool, listen + connect, allow_network=True)[:2] == (0, "connected\n")
    assert run_tool(python_tool, listen + connect)[0] == 1


def test_tool_output_is_clipped(python_tool: ModuleType) -> None:
    _, out, _ = run_tool(python_tool, "print('x' * 100_000)")
    assert len(out) < python_tool.MAX_OUTPUT_CHARS + 100
    assert "output cut at" in out


def test_model_sees_only_the_code_parameter(python_tool: ModuleType) -> None:
    from agentscope.tool import Toolkit

    toolkit = Toolkit()
    toolkit.register_tool_function(python_tool.execute_python_code)
    (schema,) = toolkit.get_json_schemas()
    assert schema["function"]["name"] == "execute_python_code"
    assert list(schema["function"]["parameters"]["properties"]) == ["code"]
    reply = asyncio.run(python_tool.execute_python_code("print(6 * 7)"))
    assert reply.content[0]["text"] == "<returncode>0</returncode><stdout>42\n</stdout><stderr></stderr>"


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
    lines = [json.loads(line) for line in rollout_file.read_text(encoding="utf-8").splitlines()]
    assert [line["task_id"] for line in lines] == ["test-0", "test-1"]
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
