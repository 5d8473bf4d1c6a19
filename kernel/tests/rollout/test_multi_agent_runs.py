"""Multi-agent rollouts: which agents train, per-agent rewards, and routing calls to adapters."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from astuner import Task, Workflow, WorkflowOutput
from astuner.config import AstunerConfig
from astuner.core.task import JudgeOutput
from astuner.errors import ConfigError
from astuner.rollout.agents import AgentPlan, agent_plan, refuse_agent_adapters
from astuner.rollout.engine import Generation, SamplingParams
from astuner.rollout.runner import RolloutRunner
from astuner.rollout.workflow import adapt_workflow
from astuner.testing.engines import ScriptedEngine

SAMPLING = SamplingParams(temperature=1.0, max_tokens=16)
ROLES = ("wolf", "seer", "villager")


def config(**astuner: object) -> AstunerConfig:
    return AstunerConfig(**astuner)


def plan_of(run_config: AstunerConfig, workflow_targets: Sequence[str] = ()) -> AgentPlan:
    """The agent plan of `run_config`, picked out as the rollout stack picks it."""
    return agent_plan(
        run_config.agents,
        workflow_targets,
        trainable_targets=run_config.rollout.trainable_targets,
        shared_lora_rank=run_config.model.lora.rank,
    )


def test_without_adapters_the_config_targets_win_over_the_workflow_s() -> None:
    assert plan_of(config(), ["wolf"]).trainable == ("wolf",)
    assert plan_of(config(rollout={"trainable_targets": ["seer"]}), ["wolf"]).trainable == ("seer",)
    assert plan_of(config(), []).adapters == frozenset()


def test_adapters_train_their_agents_and_fixed_ones_need_a_folder(tmp_path) -> None:
    plan = plan_of(config(agents={"wolf": {"lora": {}}, "seer": {"lora": {"rank": 4}}}))
    assert plan.trainable == ("seer", "wolf") and plan.trained_adapters["seer"].rank == 4
    fixed = plan_of(
        config(agents={"wolf": {"lora": {}}, "seer": {"lora": {"path": str(tmp_path)}}}), ["wolf"]
    )
    assert fixed.trainable == ("wolf",) and fixed.fixed_adapters == {"seer": str(tmp_path)}
    assert fixed.adapters == {"wolf", "seer"}


@pytest.mark.parametrize(
    ("astuner", "targets", "says"),
    [
        ({"agents": {"wolf": {"lora": {}}}, "model": {"lora": {"rank": 8}}}, [], "model.lora.rank"),
        ({"agents": {"wolf": {"lora": {}}}}, ["wolf", "seer"], "'seer'"),
        ({"agents": {"wolf": {"lora": {}}, "seer": {"lora": {}}}}, ["wolf"], "agents.seer.lora has no path"),
    ],
)
def test_plans_that_cannot_work_name_the_key(astuner: dict, targets: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        plan_of(config(**astuner), targets)


def test_a_backbone_without_adapters_refuses_every_agent_lora_in_one_paragraph() -> None:
    refuse_agent_adapters(config(agents={"wolf": {}}).agents, "backbone x", "one model", "backbone torch")
    adapters = config(agents={"wolf": {"lora": {}}, "seer": {}, "witch": {"lora": {"rank": 4}}}).agents
    with pytest.raises(ConfigError, match=r"^agents\.wolf\.lora, agents\.witch\.lora: backbone x ") as error:
        refuse_agent_adapters(adapters, "backbone x", "one model", "backbone torch", "one group per agent")
    message = str(error.value)
    assert "\n" not in message and "seer" not in message
    assert "(one model); they need backbone torch" in message and "rollout.trainable_targets" in message
    assert message.endswith("With per-agent rewards, one group per agent.")


def test_agent_names_are_checked() -> None:
    with pytest.raises(ValueError, match="'a b'"):
        config(agents={"a b": {}})


class AdapterEngine(ScriptedEngine):
    """A scripted engine that holds adapters and reports the one each call asked for."""

    adapter_names = frozenset({"wolf", "seer"})

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        generation = await super().generate(prompt_ids, sampling)
        return generation._replace(sampling=sampling)


class Village(Workflow):
    """Each role speaks once; the metadata says what the judge should return."""

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        for role in ROLES:
            await model_tuner.for_agent(role).chat([{"role": "user", "content": f"You are the {role}."}])
        return WorkflowOutput(response="done", metadata=dict(workflow_task.task.metadata))


class RewardsFromTask:
    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        return JudgeOutput(reward=output.metadata["rewards"])


def run_village(qwen25, engine_cls, rewards: dict[str, float], **astuner: object):
    engine = engine_cls(qwen25, lambda prompt: "ok")
    runner = RolloutRunner(
        workflow=adapt_workflow(Village, "village"),
        judge=RewardsFromTask(),
        engine=engine,
        tokenizer=qwen25,
        agents=plan_of(config(**astuner)),
    )
    task = Task(task_id="t0", metadata={"rewards": rewards})
    (trajectory,) = asyncio.run(runner.run([task], SAMPLING, progress=False))
    return trajectory


ADAPTERS = {"agents": {"wolf": {"lora": {}}, "seer": {"lora": {}}}}


def test_calls_go_to_their_agent_s_adapter_and_only_adapters_train(qwen25) -> None:
    rewards = {"wolf": 1.0, "seer": 0.5}
    trajectory = run_village(qwen25, AdapterEngine, rewards, **ADAPTERS)
    calls = {c.agent_name: c for c in trajectory.calls}
    assert {role: calls[role].sampling.adapter for role in ROLES} == {
        "wolf": "wolf",
        "seer": "seer",
        "villager": None,
    }
    assert [calls[role].trainable for role in ROLES] == [True, True, False]
    assert trajectory.error is None
    assert trajectory.agent_rewards == rewards and trajectory.reward == 0.75 and trajectory.is_success


SAVED_ADAPTERS = {"agents": {role: {"lora": {"path": f"adapters/{role}"}} for role in ("wolf", "seer")}}


def test_an_engine_without_adapters_runs_every_agent_on_its_weights_and_says_so(qwen25, capfd) -> None:
    trajectory = run_village(qwen25, ScriptedEngine, {"wolf": 1.0, "seer": 0.0}, **SAVED_ADAPTERS)
    logged = capfd.readouterr().err
    assert "agents without their adapters" in logged and "agents=['seer', 'wolf']" in logged
    assert "['agents.seer.lora.path', 'agents.wolf.lora.path']" in logged
    assert "engine ScriptedEngine does not load their LoRA adapters" in logged
    assert {c.sampling.adapter for c in trajectory.calls} == {None}
    assert [c.trainable for c in trajectory.calls] == [True, True, False]


def test_new_adapters_the_engine_lacks_are_no_warning(qwen25, capfd) -> None:
    """A path-less adapter starts as the identity: the engine's own weights run that agent as it would."""
    trajectory = run_village(qwen25, ScriptedEngine, {"wolf": 1.0, "seer": 0.0}, **ADAPTERS)
    assert "agents without their adapters" not in capfd.readouterr().err
    assert {c.sampling.adapter for c in trajectory.calls} == {None}


def test_rewards_that_leave_out_a_trained_agent_are_an_error(qwen25) -> None:
    trajectory = run_village(qwen25, ScriptedEngine, {"wolf": 1.0, "seer": 0.0})
    assert trajectory.reward is None and trajectory.agent_rewards == {}
    assert "not for ['villager']" in trajectory.error and "trainable_targets" in trajectory.error


def test_a_non_finite_agent_reward_is_an_error(qwen25) -> None:
    trajectory = run_village(qwen25, AdapterEngine, {"wolf": float("nan"), "seer": 0.0}, **ADAPTERS)
    assert trajectory.reward is None and "non-finite reward" in trajectory.error


def test_a_judge_output_needs_at_least_one_agent_and_sums_them_for_success() -> None:
    assert JudgeOutput(reward={"wolf": -1.0, "seer": 0.5}).is_success is False
    assert JudgeOutput(reward={"wolf": 1.0, "seer": -0.5}).is_success is True
    with pytest.raises(ValueError, match="empty dict"):
        JudgeOutput(reward={})
