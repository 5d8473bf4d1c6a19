"""`health.acknowledged`: a health check a config crosses on purpose says so once, as info, not as a warning.

werewolves cuts every reply at 48 tokens by choice, and every debug look and training step warned
that ~100% of the replies were cut. The check still counts (console line, closing lines, metrics);
an unknown name is refused by every command that loads the config, and no backbone calls the key
unused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from astuner import compat
from astuner.declarations import declared
from astuner.plugins import Plugins

WORKFLOW = """
from astuner import WorkflowOutput


async def answer(task, model):
    call = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=call.content)
"""
CUT = "replies were cut by rollout.max_response_length_in_one_turn"


def _cut_replies(write_config, workdir: Path, acknowledged: list[str]) -> Path:
    """A debug look whose every reply ("13" and the end of turn) is cut by a one-token budget."""
    (workdir / "answer_workflow.py").write_text(WORKFLOW)
    block: dict = {
        "task_reader": {"type": "arith"},
        "rollout": {
            "agentscope_workflow": "answer_workflow->answer",
            "engine": "scripted",
            "max_response_length_in_one_turn": 1,
        },
        "debug": {"debug_first_n_tasks": 1, "debug_max_parallel": 1},
    }
    if acknowledged:
        block["health"] = {"acknowledged": acknowledged}
    return write_config(block)


@pytest.mark.parametrize("acknowledged", [[], ["truncation"]], ids=["warned", "acknowledged"])
def test_a_debug_look_warns_of_cut_replies_unless_the_config_acknowledges_them(
    scripted_app, write_config, workdir: Path, acknowledged: list[str]
) -> None:
    conf = _cut_replies(write_config, workdir, acknowledged)
    result = CliRunner().invoke(scripted_app, ["run", "--conf", str(conf), "--backbone", "debug"])
    assert result.exit_code == 0, result.output
    if acknowledged:
        assert CUT not in result.output
        assert "health check 'truncation' holds, acknowledged in the config" in result.output
    else:
        assert f"100% of the {CUT}" in result.output
        assert "acknowledged" not in result.output


def test_an_unknown_check_is_one_error_naming_the_key_the_name_and_the_checks(
    plugins: Plugins, write_config, workdir: Path
) -> None:
    from astuner.cli import make_app

    conf = write_config({"health": {"acknowledged": ["truncated"]}})
    for command in (["config", "show"], ["run", "--backbone", "debug"]):
        result = CliRunner().invoke(make_app(plugins), [*command, "--conf", str(conf)])
        assert result.exit_code == 1, result.output
        assert result.stderr.count("error:") == 1
        assert f"health.acknowledged, from config file '{conf}'" in result.stderr
        assert "no health check named 'truncated'" in result.stderr
        assert "zero_advantage_groups" in result.stderr and "Did you mean 'truncation'?" in result.stderr
    assert not (workdir / "launcher_record").exists()


def test_config_show_lists_the_acknowledged_checks(plugins: Plugins, write_config) -> None:
    from astuner.cli import make_app

    conf = write_config({"health": {"acknowledged": ["truncation"]}})
    result = CliRunner().invoke(make_app(plugins), ["config", "show", "--conf", str(conf)])
    assert result.exit_code == 0, result.output
    assert "  health:\n    acknowledged: [truncation]" in result.stdout


@pytest.mark.parametrize("backbone", ["debug", "torch", "verl", "trinity"])
def test_no_backbone_calls_the_key_unused(backbone: str) -> None:
    known = declared(Plugins())  # every installed plugin: the training backbones declare what they read
    assert compat.unused_on_backbone(["health.acknowledged"], backbone, known) == []
