"""AgentScope 2.x: the model handle as a 2.x chat model, the example, and a broken tool call."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("agentscope", minversion="2")

from agentscope.agent import Agent, InjectionConfig, ReActConfig
from agentscope.message import TextBlock, ThinkingBlock, ToolCallBlock, UserMsg
from agentscope.model import ChatModelBase
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, ToolChoice, Toolkit
from astuner_executor_ray.remote_tuner import remote_model_tuner_class

from astuner import ModelTuner, Task, Workflow, WorkflowOutput, WorkflowTask
from astuner.config import load_config
from astuner.core.trajectory import LLMCall, ToolCall
from astuner.default_plugins.arith_reader import ArithReader, ArithReaderSettings
from astuner.rollout.agentscope2_model import offered_tools, to_chat_response
from astuner.rollout.agentscope_model import model_tuner_class
from astuner.rollout.engine import SamplingParams
from astuner.rollout.runner import RunnerSettings
from astuner.testing import broken_tool_calls as script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agentscope2_agent"
ALLOWED = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="a pure function")


def multiply(a: int, b: int) -> str:
    """Multiply two integers.

    Args:
        a (int): The first number.
        b (int): The second number.
    """
    return str(a * b)


class MultiplierWorkflow(Workflow):
    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        agent = Agent(
            name="multiplier",
            system_prompt=script.SYSTEM_PROMPT,
            model=model_tuner,
            toolkit=Toolkit(tools=[FunctionTool(multiply, permission=ALLOWED)]),
            injection_config=InjectionConfig(inject_runtime_state=False),
            react_config=ReActConfig(interruption_raise_cancelled_error=True),
        )
        await agent.reply(UserMsg(name="user", content=workflow_task.task.main_query))
        reply = await agent.reply(UserMsg(name="user", content=script.FOLLOW_UP))
        return WorkflowOutput(response=reply.get_text_content() or "")


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agentscope2_agent_workflow", EXAMPLE / "workflow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_model_handle_is_a_2x_chat_model_here_and_in_a_ray_worker() -> None:
    assert issubclass(model_tuner_class(), ChatModelBase) and issubclass(model_tuner_class(), ModelTuner)
    remote = remote_model_tuner_class()(
        rollout_id="r", gateway_url="http://127.0.0.1:9", sampling=SamplingParams(), timeout=1.0
    )
    assert isinstance(remote, ChatModelBase)
    assert remote.formatter.supported_input_media_types == []  # the agent turns media into text notes
    assert remote.stream is False


def test_a_call_becomes_thinking_text_and_tool_call_blocks() -> None:
    call = LLMCall(
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5],
        reasoning="3 times 4",
        content="Let me check.",
        tool_calls=[ToolCall(id="call_0_0", name="multiply", arguments='{"a": 3, "b": 4}')],
    )
    response = to_chat_response(call, started=0.0)
    thinking, text, tool_call = response.content
    assert isinstance(thinking, ThinkingBlock) and thinking.thinking == "3 times 4"
    assert isinstance(text, TextBlock) and text.text == "Let me check."
    assert isinstance(tool_call, ToolCallBlock)
    assert (tool_call.id, tool_call.name, tool_call.input) == ("call_0_0", "multiply", '{"a": 3, "b": 4}')
    assert (response.usage.input_tokens, response.usage.output_tokens, response.is_last) == (3, 2, True)


def test_tool_choice_narrows_or_hides_the_tools() -> None:
    tools = [script.MULTIPLY_TOOL, {"type": "function", "function": {"name": "add", "parameters": {}}}]
    assert offered_tools(tools, None) == tools
    assert offered_tools(tools, ToolChoice(mode="auto")) == tools
    assert offered_tools(tools, ToolChoice(mode="none")) is None
    assert offered_tools(tools, ToolChoice(mode="required", tools=["multiply"])) == [script.MULTIPLY_TOOL]


def test_agent_survives_a_broken_tool_call(run_rollout) -> None:
    script.check_rollout(run_rollout(MultiplierWorkflow))


def test_the_example_solves_an_arith_task_with_its_calculator(run_rollout, example: ModuleType) -> None:
    config = load_config(EXAMPLE / "agentscope2_agent.yaml")
    assert config.rollout.agentscope_workflow == "workflow->CalculatorAgentWorkflow"
    task: Task = next(ArithReader(ArithReaderSettings(**config.task_reader.arith)).read("train"))
    call = {"name": "calculate", "arguments": {"expression": task.metadata["expression"]}}

    def respond(prompt: str) -> str:
        """Ask the calculator for the task's expression, then box what it answered."""
        if "<tool_response>" not in prompt:
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        return "\\boxed{" + prompt.split("<tool_response>\n")[1].split("\n</tool_response>")[0] + "}"

    trajectory = run_rollout(example.CalculatorAgentWorkflow, respond=respond, task=task)
    assert trajectory.error is None, trajectory.error
    assert (trajectory.reward, trajectory.is_success) == (1.0, True)  # the calculator got it right
    first, second = trajectory.calls
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [("calculate", call["arguments"])]
    assert second.content == f"\\boxed{{{task.metadata['answer']}}}"


def test_the_example_agent_stops_at_the_rollout_timeout(run_rollout, example: ModuleType) -> None:
    trajectory = run_rollout(
        example.CalculatorAgentWorkflow, settings=RunnerSettings(rollout_timeout=0.3), delay=30
    )
    assert trajectory.error is not None and trajectory.error.startswith("Timeout:")
    assert trajectory.reward is None
