"""The tool agent as an AgentScope `ReActAgent`: the same task, tool, prompt and demonstrations.

workflow.py writes the agent loop by hand on the OpenAI SDK; this module
hands it to AgentScope 1.0.x's `ReActAgent` with a `Toolkit` holding
`multiply`, the way an AgentScope user would write it (the init template's
`math` workflow wires a ReActAgent to astuner's model handle the same way).
Everything the model reads is taken from workflow.py, so both variants
show it the same first prompt and `demonstrations.jsonl` warm-starts
either:

- `SYSTEM_PROMPT` is the agent's `sys_prompt`;
- the toolkit's schema is workflow.py's `TOOLS[0]`, given as `json_schema`:
  the schema AgentScope derives from the docstring has the same content
  with its keys in another order, and astuner writes the schema into
  SmolLM2's system turn as JSON text, so the order would show;
- the tool's result is workflow.py's `run_tool` on the call's arguments, so
  a good call returns the product and a bad one the same
  `str({"error": ...})` text as in the OpenAI-SDK loop.

`max_iters=MAX_TURNS - 1`: up to two rounds of tool calls, as in
workflow.py. Where the agent still calls a tool in its second reply,
ReActAgent's own closing step asks once more (its "You have failed to
generate response within the maximum iterations" user turn, no tools
offered): the third model call, as workflow.py's third reply.
"""

from __future__ import annotations

import json
from typing import Any

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg, TextBlock
from agentscope.tool import Toolkit, ToolResponse
from workflow import MAX_TURNS, SYSTEM_PROMPT, TOOLS, last_integer, run_tool

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask


def multiply_tool(**arguments: Any) -> ToolResponse:
    """The `multiply` tool as AgentScope runs it: workflow.py's `run_tool` on the call's arguments.

    It takes the arguments as they come, so a missing or extra one gets the
    same error text as in the OpenAI-SDK loop rather than Toolkit's own.
    """
    text = run_tool("multiply", json.dumps(arguments))
    return ToolResponse(content=[TextBlock(type="text", text=text)])


def make_toolkit() -> Toolkit:
    """A Toolkit holding `multiply` under workflow.py's schema, key for key."""
    toolkit = Toolkit()
    toolkit.register_tool_function(multiply_tool, func_name="multiply", json_schema=TOOLS[0])
    return toolkit


def make_agent(model: ModelTuner) -> ReActAgent:
    """The ReActAgent of one rollout, on astuner's model handle, its console output off."""
    agent = ReActAgent(
        name="calculator",
        sys_prompt=SYSTEM_PROMPT,
        model=model,
        formatter=OpenAIChatFormatter(),
        toolkit=make_toolkit(),
        memory=InMemoryMemory(),
        max_iters=MAX_TURNS - 1,
    )
    agent.set_console_output_enabled(False)
    return agent


async def solve(question: str, model_tuner: ModelTuner) -> WorkflowOutput:
    """Let the agent answer; the metadata is workflow.py's, so the `exact` judge and tool metrics apply.

    `final_answer` is the last integer of the agent's reply; `tool_calls`
    counts the tool results in its memory: every call it ran, a failing one too.
    """
    agent = make_agent(model_tuner)
    reply = await agent.reply(Msg("user", question, role="user"))
    text = reply.get_text_content() or ""
    memory = await agent.memory.get_memory()
    tool_calls = sum(len(msg.get_content_blocks("tool_result")) for msg in memory)
    metadata = {"final_answer": last_integer(text), "tool_calls": tool_calls}
    return WorkflowOutput(response=text, metadata=metadata)


class ReActToolAgentWorkflow(Workflow):
    name: str = "tool_agent_react_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        return await solve(workflow_task.task.main_query, model_tuner)
