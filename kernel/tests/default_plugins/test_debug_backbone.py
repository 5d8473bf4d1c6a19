"""`astuner run --backbone debug`: rollouts on the first tasks, a table, and a rollout file."""

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from astuner.record import read_trajectories
from astuner.testing.counting import count_builds
from astuner.testing.records import rollout_rows

REPO = Path(__file__).resolve().parents[3]

WORKFLOW = """
import threading

from astuner import WorkflowOutput

async def answer(task, model):
    call = await model.chat([{"role": "user", "content": task["question"]}])
    main = threading.current_thread() is threading.main_thread()
    return WorkflowOutput(response=call.content, metadata={"final_answer": call.content, "main_thread": main})
"""


@pytest.fixture
def app(scripted_app):
    return scripted_app


def test_debug_run_writes_rollouts_and_prints_a_table(app, write_config, workdir: Path) -> None:
    (workdir / "answer_workflow.py").write_text(WORKFLOW)
    conf = write_config(
        {
            "task_reader": {"type": "arith"},
            "rollout": {"agentscope_workflow": "answer_workflow->answer", "engine": "scripted"},
            "debug": {"debug_first_n_tasks": 3, "num_repeat": 2, "debug_max_parallel": 1},
        },
        name="dbg.yaml",
    )
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "debug"])
    assert result.exit_code == 0, result.output
    assert "debug rollouts" in result.stdout and "arith-validation-00002" in result.stdout
    (rollout_file,) = (workdir / "launcher_record" / "dbg").glob("*/rollouts/debug.jsonl")
    trajectories = read_trajectories(rollout_file)
    assert len(trajectories) == 6
    for t in trajectories:
        call = t.calls[0]
        assert call.response_ids and call.response_logprobs and call.prompt_ids
        assert t.reward == (1.0 if t.metadata["task"]["metadata"]["answer"] == "13" else 0.0)
        # breakpoints in workflow code work because rollouts run in the main thread
        assert t.metadata["workflow_output"]["metadata"]["main_thread"] is True


def test_unknown_workflow_fails_before_any_model_loads(app, write_config) -> None:
    conf = write_config({"rollout": {"agentscope_workflow": "nowhere_mod->flow", "engine": "scripted"}})
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "debug"])
    assert result.exit_code == 1
    assert "Cannot import module 'nowhere_mod'" in result.stderr


@pytest.mark.slow
def test_react_agent_on_smollm2_over_arith(tmp_path: Path) -> None:
    """The math example's AgentScope ReActAgent, the real SmolLM2, the arith task set."""
    conf = tmp_path / "smoke.yaml"
    conf.write_text(
        "astuner:\n"
        "  model: {path: 'builtin:smollm2-135m-instruct'}\n"
        "  task_reader: {type: arith}\n"
        "  task_judge: {judge_protocol: exact}\n"
        "  rollout: {agentscope_workflow: 'workflow->MathAgentWorkflow', temperature: 0.7,\n"
        "            max_response_length_in_one_turn: 48, max_model_len: 2048}\n"
        f"  experiment_dir: '{tmp_path / 'records'}'\n"
        "  debug: {debug_first_n_tasks: 2, debug_max_parallel: 2}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "astuner", "run", "--conf", str(conf), "--backbone", "debug"],
        cwd=REPO / "examples" / "math_agent",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "arith-validation-00001" in result.stdout
    (rollout_file,) = (tmp_path / "records").glob("smoke/*/rollouts/debug.jsonl")
    lines = rollout_rows(rollout_file)
    assert len(lines) == 2
    for line in lines:
        assert line["error"] is None, line["error"]
        assert isinstance(line["reward"], float)
        call = line["calls"][0]
        assert call["prompt_ids"] and call["response_ids"]
        assert len(call["response_logprobs"]) == len(call["response_ids"])
        assert all(lp <= 0 for lp in call["response_logprobs"])


def test_a_debug_run_builds_its_reader_judge_and_checks_once(
    app, plugins, write_config, workdir: Path
) -> None:
    counts = count_builds(plugins)
    (workdir / "answer_workflow.py").write_text(WORKFLOW)
    conf = write_config(
        {
            "task_reader": {"type": "counted_arith"},
            "task_judge": {"judge_protocol": "counted_exact"},
            "rollout": {
                "agentscope_workflow": "answer_workflow->answer",
                "engine": "scripted",
                "compute_madness_checklist": ["counted_nonsense"],
            },
            "debug": {"debug_first_n_tasks": 3, "num_repeat": 2},
        }
    )
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "debug"])
    assert result.exit_code == 0, result.output
    assert counts == {"reader": 1, "judge": 1, "madness_check": 1}
