"""Seed 000 ("run the math agent"): its config and workflow fragments in the layout it names, run as written.

The tutorial shows fragments of `tutorial/math_agent.py` (class `ExampleMathLearn`,
the first tutorials' `agentscope_execute(init_messages, beyondagent_proxy, config)`)
and the config `launcher/math_agent/git-math-agentscope.yaml`. The lines around
the fragments (imports, the class, the answer extraction) are this test's; the
fragments are taken from the tutorial's text verbatim.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from seedtext import GSM8K, code_blocks, indent, needs_seeds, run_seed

from astuner.testing.records import rollout_rows

pytestmark = [needs_seeds, pytest.mark.slow, pytest.mark.timeout(900)]

WORKFLOW = """\
from agentscope.agent import ReActAgent
from agentscope.formatter import DashScopeChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.tool import Toolkit, execute_python_code
from pydantic import BaseModel, Field

from astuner import Workflow

system_prompt = "You are an agent specialized in solving math problems. Reply with the final number."


class FinalResult(BaseModel):
    result: str = Field(description="The final answer: one number.")


class ExampleMathLearn(Workflow):
    async def agentscope_execute(self, init_messages, beyondagent_proxy, config):
{agent}
        final_answer = (result.metadata or {{}}).get("result") or result.get_text_content()
{register}
        return beyondagent_proxy
"""


def lay_out(root: Path) -> Path:
    agent, register = code_blocks(0, "python")[:2]
    (root / "tutorial").mkdir()
    (root / "tutorial" / "math_agent.py").write_text(
        WORKFLOW.format(agent=indent(agent, 8), register=indent(register, 8)), encoding="utf-8"
    )
    (config,) = code_blocks(0, "yaml")
    data = yaml.safe_load(config)
    data["astune"]["model"]["path"] = "builtin:smollm2-135m-instruct"
    data["astune"]["task_reader"]["huggingface_dat_repo"] = {
        "dataset_path": str(GSM8K.resolve()),
        "training_split": "train",
        "validation_split": "test",
    }
    path = root / "launcher" / "math_agent" / "git-math-agentscope.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def test_the_seed_000_agent_runs_on_the_debug_backbone(tmp_path: Path) -> None:
    lay_out(tmp_path)
    err = run_seed(
        "--conf", "launcher/math_agent/git-math-agentscope.yaml", "--backbone=debug",
        # The judge MathAnswerAndLlmAsJudge asks an "alien" model; here the built-in one, served in-process.
        "-o", "task_judge.alien_llm_model=builtin:smollm2-135m-instruct",
        "-o", "task_judge.math_answer_llm.engine=transformers",
        "-o", "task_judge.alien_llm_response_length=32",
        # Bounds the tutorial leaves at their defaults, to keep CI's run short.
        "-o", "debug.debug_first_n_tasks=1", "-o", "rollout.max_response_length_in_one_turn=48",
        cwd=tmp_path,
    )  # fmt: skip
    for notice in (
        "'astune:' is the old name of the 'astuner:' block",
        "'rollout.agentscope_learn_protocol' is now 'rollout.agentscope_workflow'",
        "'rollout.use_agentscope_protocol' has no effect any more",
        "is the built-in 'math_answer_llm' today",
        "ExampleMathLearn.agentscope_execute(init_messages, astune_proxy, config) is the first tutorials'",
        "update_judge_input_dictionary(...) is the first tutorials' way",
    ):
        assert err.count(notice) == 1, notice
    (records,) = (tmp_path / "launcher_record" / "git-math-agentscope").glob("*/rollouts/debug.jsonl")
    (trajectory,) = rollout_rows(records)
    assert trajectory["error"] is None
    assert trajectory["calls"] and all(call["response_ids"] for call in trajectory["calls"])
    # AgentScope's structured output: the model is offered the generate_response tool
    assert any(tool["function"]["name"] == "generate_response" for tool in trajectory["calls"][0]["tools"])
    handed = trajectory["metadata"]["workflow_output"]["metadata"]
    assert isinstance(handed["final_answer"], str)  # registered by update_judge_input_dictionary
    assert trajectory["reward"] in (0.0, 1.0)
