"""The tool-agent example's AgentScope ReActAgent variant against its OpenAI-SDK original.

The variant's point is that demonstrations.jsonl and the config's
demonstration fit it as they are: the model must read the same prompts.
The scripted rollouts (SmolLM2's tokenizer, a scripted engine, no weights)
run both configs through `rollout_stack` and compare the token ids of what
each model call saw; the debug run drives the variant end to end on the
tiny random-weight model.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("agentscope")

from test_tool_agent import EXAMPLE, REPO, uses_the_tool

from astuner.config import AstunerConfig, load_config
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.trajectory import Trajectory
from astuner.record import read_trajectories
from astuner.testing.engines import scripted_rollout

QUESTION = re.compile(r"What is (\d+) times (\d+)\?")
HINT = "You have failed to generate response within the maximum iterations."


@pytest.fixture
def modules(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """workflow.py and react_workflow.py as the config loads them: top-level modules of the example folder."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    for name in ("workflow", "react_workflow"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import react_workflow
    import workflow

    return workflow, react_workflow


def load(name: str) -> AstunerConfig:
    for module in ("workflow", "react_workflow"):  # fresh from the example folder, whatever ran before
        sys.modules.pop(module, None)
    return load_config(EXAMPLE / name, backbone="debug")


def test_the_config_is_the_original_but_for_the_workflow(workdir: Path) -> None:
    react, original = load("tool_agent_react.yaml"), load("tool_agent.yaml")
    assert react.rollout.agentscope_workflow == "react_workflow->ReActToolAgentWorkflow"
    assert (react.project_name, react.experiment_name) == ("tool_agent_react", "tool_agent_react")
    ignored = {"project_name": True, "experiment_name": True, "rollout": {"agentscope_workflow"}}
    assert react.model_dump(exclude=ignored) == original.model_dump(exclude=ignored)


def test_the_toolkit_holds_multiply_under_the_openai_schema(modules: tuple[ModuleType, ModuleType]) -> None:
    workflow, react_workflow = modules
    assert react_workflow.make_toolkit().get_json_schemas() == workflow.TOOLS
    # the same keys in the same order: astuner writes the schema into SmolLM2's system turn as JSON
    assert json.dumps(react_workflow.make_toolkit().get_json_schemas()) == json.dumps(workflow.TOOLS)
    agent = react_workflow.make_agent(model=None)
    assert (agent.sys_prompt, agent.max_iters) == (workflow.SYSTEM_PROMPT, workflow.MAX_TURNS - 1)


@pytest.mark.parametrize(
    "arguments",
    [{"a": 412, "b": 37}, {"a": "412", "b": 37}, {"a": 412}, {"a": 412, "b": 37, "c": 1}],
)
def test_the_tool_answers_as_run_tool_does(modules: tuple[ModuleType, ModuleType], arguments: dict) -> None:
    workflow, react_workflow = modules
    (block,) = react_workflow.multiply_tool(**arguments).content
    assert block["text"] == workflow.run_tool("multiply", json.dumps(arguments))


def calls_every_time(prompt: str) -> str:
    """Call multiply on the last question, however many results are already back."""
    a, b = QUESTION.findall(prompt)[-1]
    return f'<tool_call>\n{{"name": "multiply", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'


def run_config(name: str, tokenizer: ChatTokenizer, respond: Callable[[str], str]) -> Trajectory:
    return scripted_rollout(load(name), tokenizer, respond)


def test_both_variants_show_the_model_the_same_prompts(workdir: Path, smollm2: ChatTokenizer) -> None:
    original = run_config("tool_agent.yaml", smollm2, uses_the_tool)
    react = run_config("tool_agent_react.yaml", smollm2, uses_the_tool)
    assert len(react.calls) == len(original.calls) == 2
    for ours, theirs in zip(react.calls, original.calls, strict=True):
        assert ours.prompt_ids == theirs.prompt_ids  # system turn, tool list, demonstration, result turn
        assert ours.response_ids == theirs.response_ids
    assert react.reward == original.reward == 1.0
    output = react.metadata["workflow_output"]["metadata"]
    assert output == original.metadata["workflow_output"]["metadata"]
    assert output["tool_calls"] == 1


def test_past_two_rounds_of_calls_react_asks_for_an_answer_without_tools(
    workdir: Path, smollm2: ChatTokenizer
) -> None:
    """The documented difference: the third call. The OpenAI-SDK loop asks as before (tools offered);
    ReActAgent's closing step adds its hint and offers no tools, so no tool list and no demonstration."""
    original = run_config("tool_agent.yaml", smollm2, calls_every_time)
    react = run_config("tool_agent_react.yaml", smollm2, calls_every_time)
    assert len(react.calls) == len(original.calls) == 3
    assert [c.prompt_ids for c in react.calls[:2]] == [c.prompt_ids for c in original.calls[:2]]
    third, theirs = smollm2.decode(react.calls[2].prompt_ids), smollm2.decode(original.calls[2].prompt_ids)
    assert HINT in third and HINT not in theirs
    assert "You can use these tools" in theirs and "You can use these tools" not in third
    assert "508 times 64" in theirs and "508 times 64" not in third
    for trajectory in (original, react):  # the third reply's calls are not run in either
        assert trajectory.metadata["workflow_output"]["metadata"] == {"final_answer": "", "tool_calls": 2}


def test_a_debug_run_on_the_tiny_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`astuner run --backbone debug` of the variant end to end; the tiny model's replies are noise."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "astuner",
            "run",
            "--conf",
            "examples/tool_agent/tool_agent_react.yaml",
            "--backbone",
            "debug",
            "-o",
            f"model.path={tiny_model_dir}",
            "-o",
            "rollout.max_response_length_in_one_turn=16",
            "-o",
            "debug.debug_first_n_tasks=2",
            "-o",
            f"experiment_dir={tmp_path / 'records'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (rollout_file,) = (tmp_path / "records").glob("tool_agent_react/*/rollouts/debug.jsonl")
    trajectories = list(read_trajectories(rollout_file))
    assert len(trajectories) == 2
    for trajectory in trajectories:
        assert trajectory.error is None, trajectory.error
        assert 1 <= len(trajectory.calls) <= 3
        assert set(trajectory.metadata["workflow_output"]["metadata"]) == {"final_answer", "tool_calls"}
