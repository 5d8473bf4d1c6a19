"""What the tutorials' workflows and judges write runs as written: attributes, first-form
`agentscope_execute`, `update_judge_input_dictionary`, dictionary judges, `Msg` responses,
AgentScope Tuner's output models, and `rollout.disable_toolcalls`."""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from astuner import Task, Workflow, WorkflowOutput, WorkflowTask
from astuner.config import load_config
from astuner.logs import configure_logging
from astuner.rollout.engine import SamplingParams
from astuner.rollout.judging import AdaptedJudge

TASK = Task(task_id="q", main_query="Six times seven?", metadata={"answer": "42"})


def run_one(runner: Any) -> Any:
    (trajectory,) = asyncio.run(runner.run([TASK], SamplingParams(max_tokens=64), progress=False))
    json.loads(trajectory.model_dump_json())  # the record a run writes
    return trajectory


class AgentKeeper(Workflow):
    name: str = "keeper"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: Any) -> WorkflowOutput:
        self.toolkit = object()  # seed 002 keeps its toolkit and agent on the workflow
        self.agent = model_tuner
        call = await self.agent.chat([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(response=call.content)


def test_a_workflow_keeps_what_it_likes_on_itself(make_runner) -> None:
    runner, _ = make_runner(AgentKeeper, lambda prompt: "42")
    trajectory = run_one(runner)
    assert trajectory.error is None and trajectory.reward == 1.0


class FirstForm(Workflow):
    async def agentscope_execute(self, init_messages, astune_proxy, config):
        call = await astune_proxy.chat(init_messages)
        astune_proxy.update_judge_input_dictionary(final_answer=call.content.strip())
        return astune_proxy


class DictionaryJudge:
    """A judge in the first tutorials' style."""

    seen: ClassVar[dict[str, Any]] = {}

    def __init__(self, config: Any) -> None:
        self.config = config

    def compute_reward(self, judge_input_dictionary):
        DictionaryJudge.seen = dict(judge_input_dictionary)
        answer = judge_input_dictionary["task_core_arg"].task.metadata["answer"]
        correct = judge_input_dictionary["final_answer"] == answer
        return (1.0 if correct else 0.0), correct


def test_first_form_workflow_hands_its_answer_to_a_dictionary_judge(make_runner, capsys) -> None:
    configure_logging()
    runner, _ = make_runner(FirstForm, lambda prompt: "42")
    runner.judge = AdaptedJudge(DictionaryJudge(None), "DictionaryJudge")
    others = [TASK.model_copy(update={"task_id": f"q{i}"}) for i in range(3)]
    asyncio.run(runner.run(others, SamplingParams(max_tokens=64), num_repeat=2, progress=False))
    trajectory = run_one(runner)
    err = capsys.readouterr().err
    # one notice per old spelling per run, not per rollout (7 rollouts ran)
    assert err.count("FirstForm.agentscope_execute(init_messages, astune_proxy, config) is the first") == 1
    assert err.count("update_judge_input_dictionary(...) is the first tutorials' way") == 1
    assert trajectory.error is None
    assert (trajectory.reward, trajectory.is_success) == (1.0, True)
    seen = DictionaryJudge.seen
    assert seen["env"] is None and seen["final_answer"] == "42"
    assert seen["task_core_arg"].task.main_query == "Six times seven?"
    (step,) = seen["grouped_steps"]  # one model call: what it was shown, then its reply
    assert step[0] == {"role": "user", "content": "Six times seven?"}
    assert step[-1] == {"role": "assistant", "content": "42"}
    assert trajectory.metadata["workflow_output"]["metadata"] == {"final_answer": "42"}


class DecidesItself(Workflow):
    async def agentscope_execute(self, init_messages, astune_proxy, config):
        await astune_proxy.chat(init_messages)
        astune_proxy.update_judge_input_dictionary(raw_reward=0.25, is_success=True)
        return astune_proxy


class NeverAsked:
    def compute_reward(self, judge_input_dictionary):
        raise AssertionError("raw_reward and is_success were handed over: the judge is not asked")


def test_raw_reward_and_is_success_handed_over_are_the_verdict(make_runner) -> None:
    runner, _ = make_runner(DecidesItself, lambda prompt: "whatever")
    runner.judge = AdaptedJudge(NeverAsked(), "NeverAsked")
    trajectory = run_one(runner)
    assert trajectory.error is None
    assert (trajectory.reward, trajectory.is_success) == (0.25, True)


class TunerWorkflowOutput(BaseModel):
    """AgentScope Tuner's output models, field for field (`agentscope.tuner` itself imports dspy)."""

    reward: float | None = None
    response: Any | None = None
    metrics: dict[str, float] | None = None


class TunerJudgeOutput(BaseModel):
    reward: float
    metrics: dict[str, float] | None = None


def test_a_msg_response_reaches_the_judge_as_is_and_the_record_as_text(make_runner) -> None:
    msg_module = pytest.importorskip("agentscope.message")

    async def workflow(task: dict, model: Any, auxiliary_models: Any = None) -> Any:
        call = await model.chat([{"role": "user", "content": task["question"]}])
        return TunerWorkflowOutput(response=msg_module.Msg("agent", call.content, role="assistant"))

    async def judge(task: dict, response: Any, auxiliary_models: Any = None) -> Any:
        return TunerJudgeOutput(reward=1.0 if task["answer"] in response.get_text_content() else 0.0)

    runner, _ = make_runner(workflow, lambda prompt: "It is 42.")
    runner.judge = AdaptedJudge(judge, "judge")
    trajectory = run_one(runner)
    assert trajectory.error is None and trajectory.reward == 1.0
    assert trajectory.metadata["workflow_output"]["response"] == "It is 42."


class OffersATool(Workflow):
    async def execute(self, workflow_task: WorkflowTask, model_tuner: Any) -> WorkflowOutput:
        tool = {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}
        call = await model_tuner.chat([{"role": "user", "content": "Use it."}], tools=[tool])
        return WorkflowOutput(reward=0.0, metadata={"tool_calls": len(call.tool_calls), "text": call.content})


@pytest.mark.parametrize("disabled", [False, True])
def test_disable_toolcalls_shows_no_tools_and_reads_no_calls(make_runner, disabled: bool) -> None:
    reply = '<tool_call>{"name": "calculator", "arguments": {}}</tool_call>'
    prompts: list[str] = []
    runner, _ = make_runner(OffersATool, lambda prompt: prompts.append(prompt) or reply)
    runner.settings.disable_toolcalls = disabled
    trajectory = run_one(runner)
    handed = trajectory.metadata["workflow_output"]["metadata"]
    assert ("calculator" in prompts[0]) is not disabled
    assert handed["tool_calls"] == (0 if disabled else 1)
    if disabled:
        assert handed["text"] == reply


def test_config_reads_under_the_old_root_name(tmp_path) -> None:
    path = tmp_path / "appworld.yaml"
    path.write_text("astune:\n  rollout:\n    multi_turn:\n      max_steps: 7\n")
    config = load_config(path, environ={})
    assert config.astune.rollout.multi_turn.max_steps == 7 == config.astuner.rollout.multi_turn.max_steps
