"""The agent: an AgentScope ReActAgent with a calculator tool.

astuner calls `run_agent` once per rollout (the function form of a
workflow): `task` is the task's row (`question`, `answer`, ...), `model` the
trainable model handle, usable wherever AgentScope takes a chat model. Every
call the agent makes through it is recorded token for token and trained.
Change the prompt, the tools or the agent as you like; the judge scores the
text this function returns.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

from agentscope.agent import ReActAgent
from agentscope.formatter import DashScopeChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg, TextBlock
from agentscope.tool import Toolkit, ToolResponse

from astuner import ModelTuner, WorkflowOutput

SYSTEM_PROMPT = (
    "You solve arithmetic word problems. Use the calculate tool for arithmetic. "
    "Finish with the answer as a number inside \\boxed{}, e.g. \\boxed{42}."
)

OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def evaluate(node: ast.AST) -> float:
    """The value of a parsed expression of numbers, + - * / and parentheses; nothing else runs."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.operand))
    raise ValueError("only numbers, + - * / and parentheses are allowed")


def calculate(expression: str) -> ToolResponse:
    """Evaluate an arithmetic expression.

    Args:
        expression (str): Numbers with + - * / and parentheses, e.g. "(16 - 1) * 3".
    """
    try:
        text = f"{evaluate(ast.parse(expression, mode='eval').body):g}"
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError) as exc:
        text = f"error: {exc}"
    return ToolResponse(content=[TextBlock(type="text", text=text)])


async def run_agent(task: dict, model: ModelTuner, auxiliary_models: dict | None = None) -> WorkflowOutput:
    toolkit = Toolkit()
    toolkit.register_tool_function(calculate)
    agent = ReActAgent(
        name="solver",
        sys_prompt=SYSTEM_PROMPT,
        model=model,
        formatter=DashScopeChatFormatter(),
        toolkit=toolkit,
        memory=InMemoryMemory(),
        max_iters=3,
    )
    agent.set_console_output_enabled(False)
    reply = await agent.reply(Msg("user", task["question"], role="user"))
    return WorkflowOutput(response=reply.get_text_content() or "")
