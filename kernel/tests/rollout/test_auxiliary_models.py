"""Auxiliary models: built once per run from `auxiliary_models:`, called by workflow and judge, never trained.

The shared parts (`astuner.testing.auxiliary`): a function-form workflow and judge
that call the main model and the auxiliary `critic`, both scripted engines
registered as plugins.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import astuner_engine_openai.engine as openai_plugin
import pytest
from structlog.testing import capture_logs

from astuner.components import check_plugin_blocks
from astuner.config import AstunerConfig, load_config
from astuner.core.merge import merge_calls, merge_trajectory
from astuner.core.trajectory import Trajectory
from astuner.errors import ConfigError, PluginError
from astuner.plugins import Plugins
from astuner.rollout import episode
from astuner.rollout.engine import SamplingParams
from astuner.rollout.episode import EpisodeSource
from astuner.testing.auxiliary import (
    SAMPLING,
    TASKS,
    RecordingEngine,
    engines_plugin,
    flow_config,
    model_folders,
    run,
    solver,
)

AGENTSCOPE_FLOW = """
from agentscope.agent import ReActAgent
from agentscope.formatter import DashScopeChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.model import ChatModelBase

from astuner import WorkflowOutput


def agent(name, model):
    made = ReActAgent(
        name=name, sys_prompt=f"You are the {name}.", model=model,
        formatter=DashScopeChatFormatter(), memory=InMemoryMemory(), max_iters=1,
    )
    made.set_console_output_enabled(False)
    return made


async def workflow(task, model, auxiliary_models=None):
    critic = auxiliary_models["critic"]
    assert isinstance(critic, ChatModelBase) and isinstance(model, ChatModelBase)
    answer = await agent("solver", model).reply(Msg("user", task["main_query"], role="user"))
    asked = Msg("user", "Review: " + answer.get_text_content(), role="user")
    review = await agent("critic", critic).reply(asked)
    return WorkflowOutput(response=answer.get_text_content(), metadata={"review": review.get_text_content()})
"""


@pytest.fixture
def folders(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return model_folders(tmp_path_factory.mktemp("models"))


@pytest.mark.parametrize(("lenient", "rewards"), [(False, [1.0, 1.0, 0.0, 0.0]), (True, [1.0] * 4)])
def test_workflow_and_judge_call_the_auxiliary_model_and_it_is_never_trained(
    plugins: Plugins, folders: SimpleNamespace, write_config, workdir: Path, lenient: bool, rewards: list
) -> None:
    built = engines_plugin(plugins, folders, lenient)
    config = flow_config(write_config, workdir, folders, top_p=0.9, max_tokens=16)
    trajectories = run(config, plugins)

    # the judge's reward is the critic's verdict
    assert [t.reward for t in trajectories] == rewards
    (main,), (critic,) = built.solver, built.critic
    assert (main.model_path, critic.model_path) == (str(folders.main), str(folders.critic))
    assert critic.calls == 3 * len(trajectories) and main.calls == len(trajectories)
    assert set(critic.sampling) == {SamplingParams(0.0, 0.9, -1, 16)}
    assert set(main.sampling) == {SamplingParams(1.0, 1.0, -1, 64)}
    assert critic.closed and main.closed  # one engine each for the whole run, closed with the stack
    for t in trajectories:
        assert t.error is None, t.error
        assert t.metadata["workflow_output"]["metadata"] == {"review": "looks fine", "again": "still fine"}
        (call,) = t.calls
        assert (call.agent_name, call.trainable) == ("default", True)
        review, again, verdict = t.auxiliary_calls
        assert [c.content for c in (review, again)] == ["looks fine", "still fine"]
        assert verdict.content == ("<Correct>" if t.reward == 1.0 else "<NotCorrect>")
        assert all(c.agent_name == "critic" and not c.trainable for c in t.auxiliary_calls)
        assert f"Review: {call.content}" in critic.tokenizer.decode(review.prompt_ids)
        assert review.response_ids and review.response_logprobs
        # training sees the main model's tokens only
        (sample,) = merge_trajectory(t)[0]
        assert sample.input_ids == call.prompt_ids + call.response_ids
        assert [i for i, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m] == call.response_ids
        assert merge_calls(t.auxiliary_calls)[0] == []
        # the rollout file keeps them
        line = t.model_dump_json().encode()
        assert Trajectory.model_validate_json(line).auxiliary_calls == t.auxiliary_calls


def test_an_agentscope_workflow_gets_agentscope_chat_models(
    plugins: Plugins, folders: SimpleNamespace, write_config, workdir: Path
) -> None:
    built = engines_plugin(plugins, folders)
    config = flow_config(write_config, workdir, folders, module=AGENTSCOPE_FLOW, name="aux_agentscope")
    config.task_judge.judge_protocol = "exact"
    trajectories = run(config, plugins, num_repeat=1)
    right, wrong = trajectories
    assert (right.error, wrong.error) == (None, None)
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    for t in trajectories:
        assert t.metadata["workflow_output"]["metadata"]["review"] == "looks fine"
        assert [c.agent_name for c in t.calls] == ["default"] and t.calls[0].trainable
        (review,) = t.auxiliary_calls
        assert (review.agent_name, review.trainable, review.content) == ("critic", False, "looks fine")
        assert "You are the critic." in built.critic[0].tokenizer.decode(review.prompt_ids)
        assert len(merge_trajectory(t)[0]) == 1


def test_a_worker_episode_source_builds_the_auxiliary_models_once(
    plugins: Plugins, folders: SimpleNamespace, write_config, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verl or Trinity worker's source builds the critic's engine on its first episode only."""
    built = engines_plugin(plugins, folders)
    config = flow_config(write_config, workdir, folders)
    source = EpisodeSource(config, plugins)
    main = RecordingEngine(solver, folders.main, str(folders.main))

    async def go() -> list:
        return [await source.run(task, main, SAMPLING) for task in TASKS]

    monkeypatch.setattr(episode, "PROGRESS_EVERY_S", 0.0)
    with capture_logs() as logs:
        (right, right_samples), (wrong, wrong_samples) = asyncio.run(go())
    # the worker's own progress, for engines that show only theirs
    progress = [line for line in logs if line["event"] == "rollouts in this worker"]
    assert [(p["done"], p["mean_reward"]) for p in progress] == [(1, 1.0), (2, 0.5)]
    assert all(p["tokens_per_s"] > 0 for p in progress)
    assert len(built.critic) == 1 and built.critic[0].calls == 6
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    for trajectory, samples in ((right, right_samples), (wrong, wrong_samples)):
        (call,) = trajectory.calls
        assert len(trajectory.auxiliary_calls) == 3
        assert [s.input_ids for s in samples] == [call.prompt_ids + call.response_ids]


def write_block(write_config, critic: dict[str, Any]) -> AstunerConfig:
    return load_config(write_config({"auxiliary_models": {"critic": critic}}), environ={})


@pytest.mark.parametrize(
    ("critic", "message"),
    [
        (
            {"path": "m", "tempreature": 0.5},
            r"Unknown key 'auxiliary_models\.critic\.tempreature' in config file '.*conf\.yaml' \(line 5\)\. "
            r"Did you mean 'auxiliary_models\.critic\.temperature'\?",
        ),
        ({"engine": "openai"}, r"Missing required key 'auxiliary_models\.critic\.path'"),
        ({"path": "m", "max_tokens": 0}, r"Invalid value for 'auxiliary_models\.critic\.max_tokens'"),
    ],
)
def test_a_bad_auxiliary_block_is_explained_when_the_config_loads(
    write_config, critic: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        write_block(write_config, critic)


def test_an_auxiliary_model_name_must_fit_urls_and_override_keys(write_config) -> None:
    path = write_config({"auxiliary_models": {"my judge": {"path": "m"}}})
    with pytest.raises(ConfigError, match=r"'my judge' must start with a letter or _ and hold only letters"):
        load_config(path, environ={})


@pytest.mark.parametrize(
    ("critic", "message"),
    [
        (
            {"path": "m", "engine": "opnai"},
            r"^auxiliary_models\.critic\.engine: No engine named 'opnai'\. "
            r"Did you mean 'openai'\? Installed: ",
        ),
        (
            {"path": "m", "engine": "openai", "engines": {"opnai": {}}},
            r"Unknown key 'auxiliary_models\.critic\.engines\.opnai' in config file .*: it is not the "
            r"settings block of an installed engine \(installed: openai\)\. "
            r"Did you mean 'auxiliary_models\.critic\.engines\.openai'\?",
        ),
        (
            {"path": "m", "engine": "openai", "engines": {"openai": {"base_ur": "http://x/v1"}}},
            r"Unknown key 'auxiliary_models\.critic\.engines\.openai\.base_ur' in config file .*\(line 8\)\. "
            r"Did you mean 'base_url'\?",
        ),
        (
            {"path": "m", "engine": "openai", "tool_parser": "hermez"},
            r"Invalid value for 'auxiliary_models\.critic\.tool_parser' .*no tool-call parser 'hermez'\. "
            r"Choose one of: .*hermes",
        ),
    ],
)
def test_engine_mistakes_fail_before_any_model_loads(
    plugins: Plugins, write_config, critic: dict[str, Any], message: str
) -> None:
    plugins.add(openai_plugin, name="engine_openai")
    config = write_block(write_config, critic)
    with pytest.raises(ConfigError, match=message):
        check_plugin_blocks(config, plugins)


def test_engine_auto_without_a_local_engine_or_url_names_the_auxiliary_keys(
    plugins: Plugins, write_config
) -> None:
    config = write_block(write_config, {"path": "m"})
    with pytest.raises(PluginError, match=r"auxiliary_models\.critic\.engine is 'auto' but no local engine"):
        check_plugin_blocks(config, plugins)
    # with a server URL, auto means vllm, which names its package when it is not installed
    config = write_block(write_config, {"path": "m", "engine_url": "http://x"})
    with pytest.raises(
        ConfigError, match=r"^auxiliary_models\.critic\.engine: No engine named 'vllm' is installed"
    ):
        check_plugin_blocks(config, plugins)
