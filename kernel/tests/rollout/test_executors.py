"""`rollout.executor` names a registered executor: the runner sends every workflow call to it.

`local`, the default, is no executor (workflows run in the runner's event
loop); any other name must be installed, or the run stops before it starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from astuner import hookimpl
from astuner.cli import make_app
from astuner.components import WorkflowSource, check_plugin_blocks
from astuner.config import load_config
from astuner.core.task import Task, WorkflowOutput, WorkflowTask
from astuner.core.tokenizer import ChatTokenizer
from astuner.errors import ConfigError
from astuner.plugins import Plugins
from astuner.rollout.engine import SamplingParams
from astuner.rollout.model_tuner import ModelTuner
from astuner.rollout.runner import RolloutRunner
from astuner.rollout.stack import RolloutParts
from astuner.testing.engines import ScriptedEngine

FLOW = """
from astuner import WorkflowOutput


async def workflow(task, model, auxiliary_models=None):
    call = await model.chat([{"role": "user", "content": task["main_query"]}])
    return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})
"""


class InlineExecutor:
    """Runs each workflow in the runner's loop, and records what the runner asked of it."""

    def __init__(self, source: WorkflowSource) -> None:
        self.source = source
        self.sessions: list[str] = []
        self.rollouts: list[str] = []

    @asynccontextmanager
    async def session(self, runner: RolloutRunner) -> AsyncIterator[None]:
        self.sessions.append("open")
        yield
        self.sessions[-1] = "closed"

    async def run_workflow(
        self, runner: RolloutRunner, workflow_task: WorkflowTask, tuner: ModelTuner
    ) -> WorkflowOutput:
        assert self.sessions[-1] == "open"
        self.rollouts.append(workflow_task.rollout_id)
        output = await runner.workflow.run(workflow_task, tuner)
        output.metrics["ran_inline"] = 1.0
        return output


def add_inline_executor(plugins: Plugins) -> list[InlineExecutor]:
    """Executor `inline` on `plugins`; each one built is kept in the returned list."""
    built: list[InlineExecutor] = []

    def factory(workflow_source: WorkflowSource) -> InlineExecutor:
        built.append(InlineExecutor(workflow_source))
        return built[-1]

    def register_executors(register) -> None:
        register("inline", factory)

    plugins.add(SimpleNamespace(register_executors=hookimpl(register_executors)), name="inline_executor")
    return built


def test_the_registered_executor_named_in_the_config_runs_every_workflow(
    plugins: Plugins, write_config, workdir: Path, qwen25: ChatTokenizer
) -> None:
    built = add_inline_executor(plugins)
    (workdir / "inline_flow.py").write_text(FLOW, encoding="utf-8")
    rollout = {"agentscope_workflow": "inline_flow->workflow", "executor": "inline"}
    config = load_config(write_config({"rollout": rollout}), environ={})
    check_plugin_blocks(config, plugins)
    runner = RolloutParts.build(config, plugins).runner(
        engine=ScriptedEngine(qwen25, lambda prompt: "7"), tokenizer=qwen25, gateway=None, auxiliary={}
    )
    tasks = [Task(task_id=f"t{i}", main_query="Say 7.", metadata={"answer": "7"}) for i in range(2)]
    trajectories = asyncio.run(runner.run(tasks, SamplingParams(max_tokens=8), num_repeat=2, progress=False))
    (executor,) = built
    assert runner.executor is executor
    assert executor.source.name == "inline_flow->workflow"
    assert executor.source.rollout_timeout == config.rollout.rollout_timeout
    assert str(workdir.resolve()) in executor.source.search_paths
    assert executor.sessions == ["closed"]  # one session around the whole run()
    assert len(set(executor.rollouts)) == 4
    for trajectory in trajectories:
        assert trajectory.error is None, trajectory.error
        assert trajectory.reward == 1.0 and trajectory.metrics["ran_inline"] == 1.0


def test_runs_inside_a_held_session_share_it(
    plugins: Plugins, write_config, workdir: Path, qwen25: ChatTokenizer
) -> None:
    """Overlapping runs (asynchronous rollouts' batches) inside `runner.session()` open no session of
    their own; after the block, a run opens its own again."""
    built = add_inline_executor(plugins)
    (workdir / "inline_flow.py").write_text(FLOW, encoding="utf-8")
    rollout = {"agentscope_workflow": "inline_flow->workflow", "executor": "inline"}
    config = load_config(write_config({"rollout": rollout}), environ={})
    runner = RolloutParts.build(config, plugins).runner(
        engine=ScriptedEngine(qwen25, lambda prompt: "7"), tokenizer=qwen25, gateway=None, auxiliary={}
    )
    tasks = [Task(task_id=f"t{i}", main_query="Say 7.", metadata={"answer": "7"}) for i in range(2)]
    sampling = SamplingParams(max_tokens=8)

    async def overlapping() -> list[list]:
        async with runner.session():
            return await asyncio.gather(
                *(runner.run(tasks, sampling, 2, tag=f"step{i}", progress=False) for i in (1, 2))
            )

    batches = asyncio.run(overlapping())
    (executor,) = built
    assert executor.sessions == ["closed"]  # one session for both runs, closed with the block
    assert [len(b) for b in batches] == [4, 4]
    assert all(t.error is None for b in batches for t in b)
    alone = asyncio.run(runner.run(tasks, sampling, 1, progress=False))
    assert executor.sessions == ["closed", "closed"]
    assert all(t.error is None for t in alone)


def test_local_builds_no_executor(plugins: Plugins, write_config, workdir: Path) -> None:
    (workdir / "local_flow.py").write_text(FLOW, encoding="utf-8")
    rollout = {"agentscope_workflow": "local_flow->workflow"}
    config = load_config(write_config({"rollout": rollout}), environ={})
    assert config.rollout.executor == "local"
    assert RolloutParts.build(config, plugins).executor is None


def test_an_executor_that_is_not_installed_is_one_paragraph_naming_key_choices_and_package(
    plugins: Plugins, write_config
) -> None:
    add_inline_executor(plugins)
    config = load_config(write_config({"rollout": {"executor": "ray"}}), environ={})
    with pytest.raises(ConfigError) as caught:
        check_plugin_blocks(config, plugins)
    message = str(caught.value)
    assert message.startswith("rollout.executor: No executor named 'ray' is installed (installed: inline).")
    assert "`pip install astuner-executor-ray`" in message
    assert "'local' (the default) runs workflows in the runner's own process" in message
    assert "\n" not in message


def test_a_run_with_an_unknown_executor_stops_before_its_folder_exists(
    plugins: Plugins, write_config, workdir: Path
) -> None:
    conf = write_config({"experiment_name": "no_executor", "rollout": {"executor": "elsewhere"}})
    result = CliRunner().invoke(make_app(plugins), ["run", "--conf", str(conf), "--backbone", "debug"])
    assert result.exit_code == 1
    output = " ".join(result.output.split())
    assert "rollout.executor: No executor named 'elsewhere'. Installed: (none)." in output
    assert not (workdir / "launcher_record").exists()
