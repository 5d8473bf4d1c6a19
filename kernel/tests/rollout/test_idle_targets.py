"""`rollout.trainable_targets` naming an agent that never calls: a warning after the run's rollouts
that names it and the agents that did call, and a training step that would train nothing fails."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from astuner import Task, Workflow, WorkflowOutput
from astuner.config import load_config
from astuner.core.advantages import compute_advantages
from astuner.core.merge import merge_trajectory
from astuner.core.task import JudgeOutput
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.trajectory import Trajectory
from astuner.errors import ConfigError
from astuner.plugins import Plugins
from astuner.rollout import episode
from astuner.rollout.agents import agent_plan
from astuner.rollout.engine import SamplingParams
from astuner.rollout.episode import EpisodeSource
from astuner.rollout.runner import RolloutRunner
from astuner.rollout.workflow import adapt_workflow
from astuner.testing.engines import ScriptedEngine
from astuner.testing.tokenizers import qwen25_tokenizer

SAMPLING = SamplingParams(temperature=1.0, max_tokens=16)


class Village(Workflow):
    """The wolf speaks twice, the seer once; there is no witch."""

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        for role in ("wolf", "seer", "wolf"):
            await model_tuner.for_agent(role).chat([{"role": "user", "content": f"You are the {role}."}])
        return WorkflowOutput(response="done")


class ByTask:
    """Rewards that differ within each group, so a step would have something to learn."""

    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        return JudgeOutput(reward=float(len(task.task_id)))


def run_village(qwen25, targets: list[str]) -> list[Trajectory]:
    runner = RolloutRunner(
        workflow=adapt_workflow(Village, "village"),
        judge=ByTask(),
        engine=ScriptedEngine(qwen25, lambda prompt: "ok"),
        tokenizer=qwen25,
        agents=agent_plan({}, trainable_targets=targets, shared_lora_rank=0),
    )
    tasks = [Task(task_id="t0"), Task(task_id="t10")]
    return asyncio.run(runner.run(tasks, SAMPLING, num_repeat=2, progress=False))


def training_step(trajectories: list[Trajectory], targets: list[str]) -> int:
    """What a trainer does with a step's rollouts; the number of samples it trains on."""
    samples = [s for t in trajectories for s in merge_trajectory(t, trainable_targets=targets)[0]]
    return len(compute_advantages(trajectories, samples).samples)


def test_a_target_that_never_calls_is_named_with_the_agents_that_did(qwen25, capfd) -> None:
    trajectories = run_village(qwen25, ["wolf", "witch"])
    logged = " ".join(capfd.readouterr().err.split())
    assert "rollout.trainable_targets names 'witch', which made no model call" in logged, logged
    assert "the agents that called: 'wolf' (8 calls), 'seer' (4 calls)" in logged, logged
    assert "'wolf'" not in logged.split("names", 1)[1].split("which", 1)[0]
    assert training_step(trajectories, ["wolf", "witch"]) > 0  # the wolf still trains


def test_a_step_whose_targets_all_stayed_silent_trains_nothing_and_fails(qwen25, capfd) -> None:
    trajectories = run_village(qwen25, ["witch"])
    logged = " ".join(capfd.readouterr().err.split())
    assert "rollout.trainable_targets names 'witch'" in logged, logged
    assert "No call of these rollouts trains" in logged, logged
    with pytest.raises(ConfigError) as error:
        training_step(trajectories, ["witch"])
    message = str(error.value)
    assert "\n" not in message
    for says in ("rollout.trainable_targets", "'witch'", "'wolf' (8 calls), 'seer' (4 calls)", "nothing"):
        assert says in message, message


def test_targets_that_all_call_say_nothing(qwen25, capfd) -> None:
    trajectories = run_village(qwen25, ["wolf", "seer"])
    assert "trainable_targets" not in capfd.readouterr().err
    assert training_step(trajectories, ["wolf", "seer"]) > 0


ANSWER = """
from astuner import WorkflowOutput

async def answer(task, model):
    call = await model.for_agent("solver").chat([{"role": "user", "content": task["main_query"]}])
    return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})
"""


def test_a_verl_or_trinity_worker_warns_once_its_first_episodes_are_done(
    plugins: Plugins, write_config, workdir: Path, capfd
) -> None:
    tokenizer_dir = workdir / "tokenizer"
    qwen25_tokenizer().save_pretrained(tokenizer_dir)
    (workdir / "answer_flow.py").write_text(ANSWER)
    block = {
        "model": {"path": str(tokenizer_dir)},
        "task_reader": {"type": "arith"},
        "rollout": {"agentscope_workflow": "answer_flow->answer", "trainable_targets": ["witch"]},
    }
    source = EpisodeSource(load_config(write_config(block), environ={}), plugins)
    engine = ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), lambda prompt: "13")

    async def episodes(n: int) -> None:
        for i in range(n):
            _, samples = await source.run(Task(task_id=f"t{i}", main_query="13?"), engine, SAMPLING)
            assert samples == []

    asyncio.run(episodes(episode.IDLE_AFTER - 1))
    assert "trainable_targets" not in capfd.readouterr().err  # too few episodes to tell
    asyncio.run(episodes(1))
    logged = " ".join(capfd.readouterr().err.split())
    says = f"rollout.trainable_targets names 'witch', which made no model call in these {episode.IDLE_AFTER} "
    assert says in logged, logged
    assert f"the agents that called: 'solver' ({episode.IDLE_AFTER} calls)" in logged, logged
