"""`rollout.executor: ray`: workflows run in Ray workers, model calls come back through the gateway.

A local Ray head (private temp dir, token auth off, stopped by process id)
runs the workflow of each rollout; the scripted engine, the tracker and the
judge stay in the test process, so the trajectories must carry the same
token ids and rewards as a local run.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from astuner.config import load_config  # noqa: E402
from astuner.core.merge import merge_trajectory  # noqa: E402
from astuner.core.task import Task  # noqa: E402
from astuner.core.tokenizer import load_tokenizer  # noqa: E402
from astuner.plugins import Plugins  # noqa: E402
from astuner.ray_cluster import RayHead  # noqa: E402
from astuner.rollout.stack import rollout_stack, sampling_from_config  # noqa: E402
from astuner.testing.engines import ScriptedEngine  # noqa: E402

TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n</tool_call>'

# The user's workflow file, next to the config: workers import it by its import string.
AGENT = """
import os
from astuner import WorkflowOutput

TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]


async def agent(task, model, auxiliary_models=None):
    if task["main_query"] == "explode":
        raise RuntimeError("the environment broke")
    messages = [{"role": "user", "content": task["main_query"]}]
    first = await model.chat(messages, TOOLS)
    call = first.tool_calls[0]
    messages += [
        {"role": "assistant", "content": first.content, "tool_calls": [call.to_openai()]},
        {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": "42"},
    ]
    second = await model.chat(messages, TOOLS)
    return WorkflowOutput(
        response=second.content,
        metadata={"final_answer": second.content, "pid": os.getpid(), "ids": len(second.response_ids)},
    )
"""


def respond(prompt: str) -> str:
    return "42" if "<tool_response>" in prompt else TOOL_CALL


def test_rollouts_run_in_ray_workers_and_are_recorded_in_the_driver(
    ray_head: RayHead, ray_plugins: Plugins, workdir: Path, write_config, tiny_model_dir: Path
) -> None:
    (workdir / "ray_agent.py").write_text(AGENT, encoding="utf-8")
    path = write_config(
        {
            "model": {"path": str(tiny_model_dir)},
            "rollout": {"agentscope_workflow": "ray_agent->agent", "executor": "ray"},
            "task_judge": {"judge_protocol": "exact"},
        }
    )
    config = load_config(path, environ={})
    tasks = [
        Task(task_id="t0", main_query="What is 6 * 7?", metadata={"answer": "42"}),
        Task(task_id="t1", main_query="explode", metadata={"answer": "42"}),
    ]
    engine = ScriptedEngine(load_tokenizer(str(tiny_model_dir)), respond)

    async def go() -> list:
        async with rollout_stack(config, ray_plugins, engine=engine) as runner:
            return await runner.run(tasks, sampling_from_config(config.rollout), num_repeat=2, progress=False)

    good_a, good_b, bad_a, bad_b = asyncio.run(go())
    assert engine.calls == 4  # two runs x (tool call, answer), all served by the driver's engine
    for trajectory in (good_a, good_b):
        assert trajectory.error is None, trajectory.error
        assert trajectory.reward == 1.0
        output = trajectory.metadata["workflow_output"]["metadata"]
        assert output["pid"] != os.getpid()  # the workflow ran in a Ray worker
        assert output["ids"] == len(trajectory.calls[1].response_ids) > 0  # the worker saw the token ids
        assert [c.tool_calls[0].name if c.tool_calls else None for c in trajectory.calls] == [
            "calculator",
            None,
        ]
        assert all(
            c.response_logprobs and len(c.response_logprobs) == len(c.response_ids) for c in trajectory.calls
        )
        (sample,) = merge_trajectory(trajectory)[0]
        assert sample.input_ids[: len(trajectory.calls[1].prompt_ids)] == trajectory.calls[1].prompt_ids
        assert 0 < sum(sample.loss_mask) < len(sample.input_ids)
    for trajectory in (bad_a, bad_b):
        assert trajectory.reward is None
        assert "Ray worker" in trajectory.error and "the environment broke" in trajectory.error


BREAKPOINT_AGENT = """
import os
import sys

from astuner import WorkflowOutput, bp


async def stops(task, model, auxiliary_models=None):
    hits = []
    # Ray's distributed debugger serves breakpoint() in a worker through this hook.
    sys.breakpointhook = lambda *args, **kwargs: hits.append("ray debugger")
    os.environ["ASTUNER_DB_TAGS"] = "ON"
    bp("OFF")
    bp("ON")
    return WorkflowOutput(response="x", metadata={"final_answer": "x", "hits": hits, "pid": os.getpid()})
"""


def test_an_enabled_tag_in_a_ray_worker_goes_to_rays_debugger_not_pdb(
    ray_head: RayHead, ray_plugins: Plugins, workdir: Path, write_config, tiny_model_dir: Path
) -> None:
    (workdir / "ray_stops.py").write_text(BREAKPOINT_AGENT, encoding="utf-8")
    workflow = {"agentscope_workflow": "ray_stops->stops", "executor": "ray"}
    config = load_config(
        write_config({"model": {"path": str(tiny_model_dir)}, "rollout": workflow}), environ={}
    )
    engine = ScriptedEngine(load_tokenizer(str(tiny_model_dir)), respond)

    async def go() -> list:
        async with rollout_stack(config, ray_plugins, engine=engine) as runner:
            return await runner.run(
                [Task(task_id="t", main_query="q")], sampling_from_config(config.rollout), progress=False
            )

    (trajectory,) = asyncio.run(go())
    assert trajectory.error is None, trajectory.error
    output = trajectory.metadata["workflow_output"]["metadata"]
    assert output["pid"] != os.getpid() and output["hits"] == ["ray debugger"]  # once: tag OFF did not stop
