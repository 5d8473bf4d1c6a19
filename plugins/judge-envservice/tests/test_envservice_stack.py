"""The plugin through config: reader, judge settings, the rollout stack's environment wiring, the example."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from astuner_judge_envservice.client import EnvServiceError
from astuner_judge_envservice.judge import EnvServiceJudge, EnvServiceJudgeSettings
from envservice_helpers import LoopbackServer, bisect, free_port
from typer.testing import CliRunner

from astuner import Task, WorkflowOutput, WorkflowTask
from astuner.cli import make_app
from astuner.components import build_judge, build_reader
from astuner.config import load_config
from astuner.core.tokenizer import load_tokenizer
from astuner.errors import AstunerError
from astuner.rollout.stack import environment_factory, rollout_stack, sampling_from_config
from astuner.testing.engines import ScriptedEngine

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "env_agent" / "env_agent.yaml"


def example_config(url: str, *overrides: str):
    return load_config(EXAMPLE, [f"task_reader.env_service.env_url={url}", *overrides])


def test_reader_reads_both_splits_from_the_service(env_plugins, server: LoopbackServer) -> None:
    config = example_config(server.url, "task_reader.env_service.env_type=countdown")
    reader = build_reader(config, env_plugins)
    train, validation = list(reader.read("train")), list(reader.read("validation"))
    assert len(train) == 1000 and len(validation) == 100
    assert train[0] == Task(task_id="train-0000", env_type="countdown", metadata={"split": "train"})
    assert validation[0].task_id == "dev-0000"


def test_reader_reports_an_unreachable_service(env_plugins) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    reader = build_reader(example_config(url, "task_reader.env_service.tries=1"), env_plugins)
    with pytest.raises(EnvServiceError, match=r"/get_env_profile failed after 1 of 1 tries: ConnectError"):
        list(reader.read("train"))


def test_judge_mapping_is_configurable(env_plugins) -> None:
    seeds = build_judge(example_config("http://127.0.0.1:1"), env_plugins)
    assert seeds.reward(1.0) == (1.5, True) and seeds.reward(0.4) == (0.2, False)
    raw = EnvServiceJudge(EnvServiceJudgeSettings(success_base=0, success_scale=1, failure_scale=1))
    assert raw.reward(1.0) == (1.0, True) and raw.reward(0.4) == (0.4, False)
    lenient = EnvServiceJudge(EnvServiceJudgeSettings(success_threshold=0.5))
    assert lenient.reward(0.5) == (1.25, True)
    with pytest.raises(AstunerError, match="needs the live environment"):
        asyncio.run(seeds.judge(Task(task_id="t"), WorkflowOutput()))
    with pytest.raises(AstunerError, match=r"task_reader\.type: env_service"):
        asyncio.run(seeds.judge_rollout(WorkflowTask(task=Task(task_id="t")), WorkflowOutput()))


def test_the_example_agent_plays_through_the_rollout_stack(env_plugins, server: LoopbackServer) -> None:
    """examples/env_agent unchanged (AgentScope ReActAgent, sync gym_step) with a scripted bisecting model."""
    config = example_config(server.url, "rollout.multi_turn.max_steps=10")
    tokenizer = load_tokenizer(config.model.path)
    engine = ScriptedEngine(tokenizer, bisect)
    tasks = [Task(task_id=f"train-{i:04d}", env_type="guess_number") for i in range(3)]

    async def go():
        async with rollout_stack(config, env_plugins, engine=engine) as runner:
            assert runner.gym_env_factory is not None
            return await runner.run(tasks, sampling_from_config(config.rollout), 2, progress=False)

    trajectories = asyncio.run(go())
    assert [t.error for t in trajectories] == [None] * 6
    for t in trajectories:
        steps = t.metadata["env_steps"]
        assert len(t.calls) == len(steps) and t.metadata["step_rewards"][-1] == 1.0
        assert t.reward == 1.5 and t.is_success and t.metrics["env_turns"] == len(steps)
    assert max(len(t.calls) for t in trajectories) >= 3
    # The environment's first messages became the agent's first prompt.
    first_prompt = tokenizer.decode(trajectories[0].calls[0].prompt_ids)
    assert "number guessing game" in first_prompt and "You have" in first_prompt
    counts = server.counts()
    assert (counts["live"], counts["created"], counts["released"]) == (0, 6, 6)


def test_other_readers_get_no_environment(plugins, write_config) -> None:
    config = load_config(write_config({"task_reader": {"type": "arith"}}))
    assert environment_factory(config, plugins) is None


def test_serve_command_rejects_unknown_environments(env_plugins) -> None:
    result = CliRunner().invoke(make_app(env_plugins), ["envservice", "serve", "--env", "chess"])
    assert result.exit_code == 2
    assert "unknown environment chess" in result.output and "guess_number, countdown" in result.output
