"""A run says how tools reach the model, and warns when they cannot, once its calls offer tools."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from astuner.config import load_config
from astuner.errors import ConfigError
from astuner.rollout.stack import report_tool_format


def test_smollm2_gets_astuners_format_and_the_run_says_so(smollm2, capsys) -> None:
    report_tool_format(smollm2, load_config(None))
    err = capsys.readouterr().err
    assert "tool format: hermes (the chat template renders none, so astuner writes them" in err
    assert "without a demonstration" in err


def test_a_template_that_renders_tools_keeps_them(qwen25, capsys) -> None:
    report_tool_format(qwen25, load_config(None))
    assert "tool format: template (the chat template renders them" in capsys.readouterr().err


def test_forcing_the_template_on_smollm2_is_a_warning(smollm2, capsys) -> None:
    report_tool_format(smollm2, load_config(None, ["model.tool_format=template"]))
    err = capsys.readouterr().err
    assert "warning" in err and "renders no tools" in err and "Set model.tool_format: auto" in err


def test_a_demonstration_message_with_a_bad_role_names_the_key(write_config) -> None:
    path = write_config({"model": {"tool_demonstration": [{"role": "robot", "content": "hi"}]}})
    with pytest.raises(ConfigError, match=r"model.tool_demonstration.*message 0 has role 'robot'"):
        load_config(path)


WORKFLOWS = """
from astuner import WorkflowOutput

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


async def with_tools(task, model):
    call = await model.chat([{"role": "user", "content": task["main_query"]}], tools=TOOLS)
    return WorkflowOutput(response=call.text, metadata={"final_answer": call.text})


async def without_tools(task, model):
    call = await model.chat([{"role": "user", "content": task["main_query"]}])
    return WorkflowOutput(response=call.text, metadata={"final_answer": call.text})
"""


@pytest.mark.parametrize(("workflow", "offered", "lines"), [("without_tools", 0, 0), ("with_tools", 1, 1)])
def test_a_debug_run_names_the_tool_format_only_when_its_calls_offer_tools(
    scripted_app, write_config, workdir: Path, workflow: str, offered: int, lines: int
) -> None:
    # werewolves offers no tools: a line on how tools reach the model is noise there
    (workdir / "tool_workflows.py").write_text(WORKFLOWS)
    conf = write_config(
        {
            "task_reader": {"type": "arith"},
            "rollout": {"agentscope_workflow": f"tool_workflows->{workflow}", "engine": "scripted"},
            "debug": {"debug_first_n_tasks": 2, "num_repeat": 2},
        },
        name=f"{workflow}.yaml",
    )
    result = CliRunner().invoke(scripted_app, ["run", "--conf", str(conf), "--backbone", "debug"])
    assert result.exit_code == 0, result.output
    (records,) = (workdir / "launcher_record" / workflow).glob("*/rollouts/debug.jsonl")
    assert '"error":null' in records.read_text() and '"error":"' not in records.read_text()
    assert f"tools_offered_rate={offered:.1f}" in result.stderr
    # one line for the run, though each of its four rollouts offers tools
    assert result.stderr.count("tool format:") == lines, result.stderr
