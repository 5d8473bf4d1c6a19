"""An AgentScope 2.x `Agent` with a calculator tool, trained on arithmetic word problems.

The model handle astuner passes in is an AgentScope 2.x chat model when
AgentScope 2.x is installed, so it goes straight into `Agent(model=...)`.
Three settings matter for training:

- the tool is allowed up front (2.x asks the user before it runs a custom
  tool otherwise);
- the runtime state injection (the current time and context usage, added
  to the prompt at each step) is off, so that the prompts of one rollout
  extend each other and the same task gives the same prompt in every run;
- an interruption raises instead of ending the reply politely, so that a
  rollout past `rollout.rollout_timeout` stops and is recorded as timed out
  (by default a 2.x agent swallows the cancellation and runs on).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

from agentscope.agent import Agent, InjectionConfig, ReActConfig
from agentscope.message import UserMsg
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, Toolkit

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

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


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression (str): Numbers with + - * / and parentheses, e.g. "(16 - 1) * 3".
    """
    try:
        return f"{evaluate(ast.parse(expression, mode='eval').body):g}"
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError) as exc:
        return f"error: {exc}"


def make_agent(model: ModelTuner) -> Agent:
    allowed = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="calculate only does arithmetic")
    return Agent(
        name="solver",
        system_prompt=SYSTEM_PROMPT,
        model=model,
        toolkit=Toolkit(tools=[FunctionTool(calculate, permission=allowed)]),
        react_config=ReActConfig(max_iters=3, interruption_raise_cancelled_error=True),
        injection_config=InjectionConfig(inject_runtime_state=False),
    )


class CalculatorAgentWorkflow(Workflow):
    name: str = "agentscope2_calculator"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        reply = await make_agent(model_tuner).reply(
            UserMsg(name="user", content=workflow_task.task.main_query)
        )
        return WorkflowOutput(response=reply.get_text_content() or "")
