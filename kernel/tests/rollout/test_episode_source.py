"""`EpisodeSource`: a verl or Trinity worker builds its rollout stack once, whatever the number of episodes.

The engines instantiate their agent loop / workflow per task; every episode
reaches the same source, and each brings its own engine adapter, as verl's
and Trinity's do. The counted reader, judge and madness check
(`astuner.testing.counting`) tell how often each was built.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from astuner.config import load_config
from astuner.core.task import Task
from astuner.core.tokenizer import ChatTokenizer
from astuner.plugins import Plugins
from astuner.rollout.engine import SamplingParams
from astuner.rollout.episode import EpisodeSource
from astuner.testing.counting import count_builds
from astuner.testing.engines import ScriptedEngine
from astuner.testing.tokenizers import qwen25_tokenizer

WORKFLOW = """
from astuner import WorkflowOutput

async def answer(task, model):
    call = await model.chat([{"role": "user", "content": task["main_query"]}])
    return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})
"""

SAMPLING = SamplingParams(max_tokens=16)


def _source(plugins: Plugins, write_config, workdir: Path) -> tuple[EpisodeSource, Counter[str]]:
    """A worker's source over the counted reader, judge and check (and their counts); the workflow answers
    with the model's reply."""
    counts = count_builds(plugins)
    tokenizer_dir = workdir / "tokenizer"
    qwen25_tokenizer().save_pretrained(tokenizer_dir)
    (workdir / "answer_flow.py").write_text(WORKFLOW)
    block = {
        "model": {"path": str(tokenizer_dir)},
        "task_reader": {"type": "counted_arith"},
        "task_judge": {"judge_protocol": "counted_exact"},
        "rollout": {
            "agentscope_workflow": "answer_flow->answer",
            "compute_madness_checklist": ["counted_nonsense"],
        },
    }
    return EpisodeSource(load_config(write_config(block), environ={}), plugins), counts


def _engine() -> ScriptedEngine:
    return ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), lambda prompt: "13")


def test_a_worker_builds_its_stack_once_for_every_episode_and_event_loop(
    plugins: Plugins, write_config, workdir: Path
) -> None:
    source, counts = _source(plugins, write_config, workdir)
    tasks = [
        Task(task_id=f"t{i}", main_query=f"{i} + 13 - {i}?", metadata={"answer": "13"}) for i in range(3)
    ]
    engines: list[ScriptedEngine] = []

    async def episodes() -> list[float | None]:
        """The tasks at once, as verl's worker runs its batch: each episode with its own engine."""
        fresh = [_engine() for _ in tasks]
        engines.extend(fresh)
        done = await asyncio.gather(*(source.run(t, e, SAMPLING) for t, e in zip(tasks, fresh, strict=True)))
        return [trajectory.reward for trajectory, _ in done]

    # Two event loops: Trinity's multi-threading mode runs each episode on a loop of its own.
    assert asyncio.run(episodes()) == [1.0, 1.0, 1.0]
    assert asyncio.run(episodes()) == [1.0, 1.0, 1.0]
    assert counts == {"reader": 1, "judge": 1, "madness_check": 1}
    assert [engine.calls for engine in engines] == [1] * 6


def test_an_episode_cancelled_while_the_gateway_starts_leaves_it_to_the_others(
    plugins: Plugins, write_config, workdir: Path
) -> None:
    source, _ = _source(plugins, write_config, workdir)
    task = Task(task_id="t", main_query="13?", metadata={"answer": "13"})

    async def cancel_the_first() -> float | None:
        first = asyncio.create_task(source.run(task, _engine(), SAMPLING))
        await asyncio.sleep(0)  # it waits for the gateway now
        first.cancel()
        second, _ = await source.run(task, _engine(), SAMPLING)
        assert first.cancelled()
        return second.reward

    assert asyncio.run(cancel_the_first()) == 1.0
