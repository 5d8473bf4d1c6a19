"""The math agent of the tutorial: an AgentScope ReActAgent that may run Python.

Two forms of the same workflow: the class form (`MathAgentWorkflow`, named
in math_agent.yaml) and the function form (`math_agent_workflow`) that the
AgentScope Tuner tutorial uses. Either returns the final answer (the last
`\\boxed{}` of the reply, found by the same extractor the `math_answer`
judge uses) in `metadata["final_answer"]`. The Python tool is
`astuner_tools.execute_python_code` (package `astuner-tools`), AgentScope's
tool of that name with the model's code confined (sandbox, no network,
limits), here with a 10-second ceiling on the time the model may ask for.
"""

from __future__ import annotations

from agentscope.agent import ReActAgent
from agentscope.formatter import DashScopeChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.tool import Toolkit
from astuner_judge_math.extract import extract_prediction
from astuner_tools import python_code_tool

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

# AgentScope's execute_python_code, confined; the model's `timeout` is cut to 10 s.
execute_python_code = python_code_tool(max_timeout=10)

SYSTEM_PROMPT = """You are an agent specialized in solving math problems with tools.
Please solve the math problem given to you.
You can write and execute Python code to perform calculation or verify your answer.
You should return your final answer within \\boxed{}."""


def make_agent(model: ModelTuner) -> ReActAgent:
    toolkit = Toolkit()
    toolkit.register_tool_function(execute_python_code)
    agent = ReActAgent(
        name="math_react_agent",
        sys_prompt=SYSTEM_PROMPT,
        model=model,
        formatter=DashScopeChatFormatter(),
        toolkit=toolkit,
        memory=InMemoryMemory(),
        max_iters=2,
    )
    agent.set_console_output_enabled(False)
    return agent


async def solve(question: str, model: ModelTuner) -> WorkflowOutput:
    reply = await make_agent(model).reply(Msg("user", question, role="user"))
    text = reply.get_text_content() or ""
    return WorkflowOutput(response=text, metadata={"final_answer": extract_prediction(text)})


class MathAgentWorkflow(Workflow):
    name: str = "math_agent_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        return await solve(workflow_task.task.main_query, model_tuner)


async def math_agent_workflow(
    task: dict, model: ModelTuner, auxiliary_models: dict | None = None
) -> WorkflowOutput:
    return await solve(task["question"], model)
