"""The tool-agent example: its config, its tool, its demonstrations, and its loop through a real rollout.

The rollouts run the example's own config (reader, judge, SmolLM2's tokenizer
and tool format, the demonstration) through `rollout_stack`, with a scripted
engine in place of the model, so they take a second and need no weights.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from transformers.utils import get_json_schema

from astuner.components import build_reader
from astuner.config import AstunerConfig, load_config
from astuner.core.merge import merge_trajectory
from astuner.core.metrics import rollout_metrics
from astuner.core.tokenizer import ChatTokenizer
from astuner.default_plugins.arith_reader import ArithReader, ArithReaderSettings
from astuner.plugins import Plugins
from astuner.testing.engines import scripted_rollout

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tool_agent"
_QUESTION = re.compile(r"What is (\d+) times (\d+)\?")
_RESULT = re.compile(r"Result of multiply:\n(.*?)<\|im_end\|>", re.DOTALL)


@pytest.fixture(scope="module")
def workflow() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tool_agent_workflow", EXAMPLE / "workflow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def config(workdir: Path) -> AstunerConfig:
    # workdir: an empty working directory, so `workflow->...` resolves beside the config
    return load_config(EXAMPLE / "tool_agent.yaml", backbone="debug")


def test_the_config_loads(config: AstunerConfig) -> None:
    assert config.model.path == "builtin:smollm2-135m-instruct"
    assert config.task_reader.type == "arith"
    assert config.task_judge.judge_protocol == "exact"
    assert config.rollout.agentscope_workflow == "workflow->ToolAgentWorkflow"
    assert (config.rollout.num_repeat, config.rollout.temperature) == (4, 1.0)
    assert config.rollout.max_response_length_in_one_turn == 128
    calls = [tc for m in config.model.tool_demonstration for tc in m.get("tool_calls", [])]
    assert [json.loads(tc["function"]["arguments"]) for tc in calls] == [
        {"a": 412, "b": 37},
        {"a": 508, "b": 64},
    ]
    task = next(iter(build_reader(config, Plugins(load_entry_points=False)).read("validation")))
    assert _QUESTION.fullmatch(task.main_query)


def test_multiply_and_its_schema(workflow: ModuleType) -> None:
    assert workflow.multiply(412, 37) == 15244
    with pytest.raises(TypeError, match="a must be an integer"):
        workflow.multiply("412", 37)
    schema = get_json_schema(workflow.multiply)  # how TRL turns tools=[multiply] into a schema
    schema["function"].pop("return")
    assert [schema] == workflow.TOOLS
    assert workflow.MAX_TURNS == 3 and "multiply tool" in workflow.SYSTEM_PROMPT


def test_a_bad_tool_call_is_an_error_text_as_in_trl(workflow: ModuleType) -> None:
    assert workflow.run_tool("multiply", '{"a": 412, "b": 37}') == "15244"
    error = str({"error": "a must be an integer, got '412'"})
    assert workflow.run_tool("multiply", '{"a": "412", "b": 37}') == error
    assert workflow.run_tool("multiply", '{"a": 412}').startswith("{'error': \"multiply() missing 1 required")
    assert workflow.run_tool("multiply", '{"a": 412,').startswith("{'error': 'Expecting")
    assert workflow.run_tool("add", "{}") == str({"error": "Tool add not found."})


def test_the_final_answer_is_the_last_integer(workflow: ModuleType) -> None:
    assert workflow.last_integer("412 times 37 is 15244.") == "15244"
    assert workflow.last_integer("It is 15,244") == "15244"
    assert workflow.last_integer("no idea") == ""


def test_demonstrations_are_up_to_date_correct_and_unseen(tmp_path: Path, workflow: ModuleType) -> None:
    out = tmp_path / "demonstrations.jsonl"
    subprocess.run(
        [sys.executable, str(EXAMPLE / "make_demonstrations.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    shipped = (EXAMPLE / "demonstrations.jsonl").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == shipped  # the file is what the script writes
    reader = ArithReader(ArithReaderSettings(difficulty="product", train_size=2000, validation_size=64))
    reserved = {t.main_query for split in ("train", "validation") for t in reader.read(split)}
    lines = [json.loads(line) for line in shipped.splitlines()]
    assert len(lines) == 64
    for line in lines:
        assert line["tools"] == workflow.TOOLS
        system, user, call, result, answer = line["messages"]
        assert system == {"role": "system", "content": workflow.SYSTEM_PROMPT}
        assert user["content"] not in reserved
        a, b = (int(n) for n in _QUESTION.fullmatch(user["content"]).groups())
        (tool_call,) = call["tool_calls"]
        assert json.loads(tool_call["function"]["arguments"]) == {"a": a, "b": b}
        assert result == {"role": "tool", "tool_call_id": "call_0", "name": "multiply", "content": str(a * b)}
        assert answer == {"role": "assistant", "content": f"{a} times {b} is {a * b}."}


# ------------------------------------------------------------- scripted rollouts


def uses_the_tool(prompt: str) -> str:
    """Call multiply on the last question; once its result is back, answer with it."""
    a, b = _QUESTION.findall(prompt)[-1]
    results = _RESULT.findall(prompt.rsplit(f"What is {a} times {b}?", 1)[1])
    if not results:
        return f'<tool_call>\n{{"name": "multiply", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'
    return f"{a} times {b} is {results[-1]}."


def passes_a_string(prompt: str) -> str:
    """Call multiply with a quoted number; answer whatever comes back."""
    a, b = _QUESTION.findall(prompt)[-1]
    if "Result of multiply:\n{'error'" not in prompt:
        return f'<tool_call>\n{{"name": "multiply", "arguments": {{"a": "{a}", "b": {b}}}}}\n</tool_call>'
    return "I cannot tell."


def breaks_its_tool_call(prompt: str) -> str:
    a, _ = _QUESTION.findall(prompt)[-1]
    return f'<tool_call>\n{{"name": "multiply", "arguments": {{"a": {a},\n</tool_call>'


def test_a_correct_tool_call_is_run_and_its_result_answers(
    config: AstunerConfig, smollm2: ChatTokenizer
) -> None:
    trajectory = scripted_rollout(config, smollm2, uses_the_tool)
    answer = trajectory.metadata["task"]["metadata"]["answer"]
    assert (trajectory.reward, trajectory.is_success) == (1.0, True)
    first, second = trajectory.calls
    (tool_call,) = first.tool_calls
    a, b = (int(n) for n in trajectory.metadata["task"]["main_query"][8:-1].split(" times "))
    assert (tool_call.name, json.loads(tool_call.arguments)) == ("multiply", {"a": a, "b": b})
    (result,) = [m for m in second.messages if m.get("tool_call_id") == tool_call.id]
    assert result == {"role": "tool", "tool_call_id": tool_call.id, "name": "multiply", "content": answer}
    assert f"Result of multiply:\n{answer}" in smollm2.decode(second.prompt_ids)  # hermes format
    assert second.content == f"{a} times {b} is {answer}." and not second.tool_calls
    output = trajectory.metadata["workflow_output"]["metadata"]
    assert output == {"final_answer": answer, "tool_calls": 1}
    metrics = rollout_metrics([trajectory], "debug")
    assert metrics["debug/tool_calls_executed"] == 1 and metrics["debug/replies_with_tool_call"] == 0.5
    assert metrics["debug/tool_calls_per_reply"] == 0.5 and metrics["debug/episodes_with_tool_call"] == 1.0
    assert second.prompt_source == "cumulative"  # the history the loop sends back extends the first call
    samples, report = merge_trajectory(trajectory)
    assert len(samples) == 1 and not report.breaks


def test_a_broken_tool_call_ends_the_rollout_with_reward_0(
    config: AstunerConfig, smollm2: ChatTokenizer
) -> None:
    trajectory = scripted_rollout(config, smollm2, breaks_its_tool_call)
    assert (trajectory.reward, trajectory.is_success) == (0.0, False)
    (call,) = trajectory.calls  # no call parsed: the reply is the final answer
    assert call.tool_calls == [] and call.tool_parse_error
    assert trajectory.metadata["workflow_output"]["metadata"]["tool_calls"] == 0
    assert rollout_metrics([trajectory], "debug")["debug/tool_parse_failures"] == 1


def test_bad_arguments_get_an_error_result_and_the_rollout_goes_on(
    config: AstunerConfig, smollm2: ChatTokenizer
) -> None:
    trajectory = scripted_rollout(config, smollm2, passes_a_string)
    assert (trajectory.reward, trajectory.is_success) == (0.0, False)
    first, second = trajectory.calls
    (tool_call,) = first.tool_calls
    (result,) = [m for m in second.messages if m.get("tool_call_id") == tool_call.id]
    assert result["content"].startswith("{'error': \"a must be an integer, got '")
    assert second.content == "I cannot tell."
    assert trajectory.metadata["workflow_output"]["metadata"] == {"final_answer": "", "tool_calls": 1}
