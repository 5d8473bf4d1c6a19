"""A rollout that ignores its timeout (catches the interrupt or the cancellation) never holds the step.

Each stubborn workflow gives up by itself after `GIVES_UP_S`, so that on code that waited for it the
test fails on the time it took instead of hanging.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from collections import Counter
from typing import ClassVar

import pytest

from astuner import Task, Workflow, WorkflowOutput
from astuner.rollout.engine import SamplingParams
from astuner.rollout.runner import RunnerSettings
from astuner.rollout.stop_signals import LoopBlocked

SAMPLING = SamplingParams(temperature=1.0, max_tokens=64)
GIVES_UP_S = 12.0
TRIES: list[str] = []  # one entry per try of a stubborn workflow
# The timeout (1 s), the watchdog's second interrupt or the cancellation's grace (2 s), some slack.
ENDS_WITHIN_S = 6.0


def tasks(n: int) -> list[Task]:
    return [Task(task_id=f"t{i}", main_query=f"Say {i}.", metadata={"answer": str(i)}) for i in range(n)]


def say_the_number(prompt: str) -> str:
    return prompt.rsplit("Say ", 1)[1].split(".", 1)[0]


class Stubborn(Workflow):
    """t1 retries a blocking or awaiting call, swallowing what `except` catches; the others answer."""

    catches: ClassVar[type[BaseException]] = Exception
    blocks: ClassVar[bool] = True

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        if workflow_task.task.task_id == "t1":
            await asyncio.sleep(0.3)  # the others answer first: a blocked loop delays their clocks too
            gives_up = time.monotonic() + GIVES_UP_S
            while time.monotonic() < gives_up:
                TRIES.append(type(self).__name__)
                try:
                    if self.blocks:
                        time.sleep(0.5)  # blocks the event loop
                    else:
                        await asyncio.sleep(0.5)
                except self.catches:
                    continue
            return WorkflowOutput(response="1", metadata={"final_answer": "1"})
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})


class RetriesOnException(Stubborn):
    catches: ClassVar[type[BaseException]] = Exception


class BlocksAndCatchesEverything(Stubborn):
    catches: ClassVar[type[BaseException]] = BaseException


class AwaitsAndCatchesEverything(Stubborn):
    catches: ClassVar[type[BaseException]] = BaseException
    blocks: ClassVar[bool] = False


class CatchesEverythingTwice(Workflow):
    """t1 blocks in a helper that swallows every interrupt; the workflow swallows what gets out of it and
    goes back to awaiting; the others answer."""

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        if workflow_task.task.task_id == "t1":
            await asyncio.sleep(0.3)
            gives_up = time.monotonic() + GIVES_UP_S
            while time.monotonic() < gives_up:
                TRIES.append(type(self).__name__)
                try:
                    self.block(gives_up)
                except BaseException:
                    await asyncio.sleep(0.2)
            return WorkflowOutput(response="1", metadata={"final_answer": "1"})
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})

    @staticmethod
    def block(gives_up: float) -> None:
        while time.monotonic() < gives_up:
            try:
                time.sleep(0.5)
            except BaseException:
                continue


def run_stubborn(make_runner, workflow: type[Workflow]) -> tuple[float, list]:
    runner, _ = make_runner(
        workflow, say_the_number, settings=RunnerSettings(rollout_timeout=1.0, max_env_worker=4), delay=0.01
    )
    started = time.monotonic()
    trajectories = asyncio.run(runner.run(tasks(3), SAMPLING, progress=False))
    return time.monotonic() - started, trajectories


def test_the_watchdogs_interrupt_is_not_caught_by_except_exception() -> None:
    assert not issubclass(LoopBlocked, Exception)


def test_a_retry_loop_catching_exception_is_cut_at_the_timeout(make_runner) -> None:
    elapsed, (t0, t1, t2) = run_stubborn(make_runner, RetriesOnException)
    assert elapsed < ENDS_WITHIN_S, f"the step waited {elapsed:.1f} s for the retrying rollout"
    assert (t0.error, t2.error) == (None, None) and (t0.reward, t2.reward) == (1.0, 1.0)
    assert t1.reward is None
    assert t1.error.startswith("Timeout: the workflow blocked the event loop for ")
    assert "time.sleep(0.5)  # blocks the event loop" in t1.error  # where it blocked


# Left to the garbage collector, an abandoned coroutine that catches GeneratorExit is reported by Python.
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(
    "workflow", [BlocksAndCatchesEverything, AwaitsAndCatchesEverything, CatchesEverythingTwice]
)
def test_a_rollout_catching_everything_is_abandoned_and_the_step_ends(make_runner, workflow) -> None:
    elapsed, (t0, t1, t2) = run_stubborn(make_runner, workflow)
    tries = len(TRIES)
    time.sleep(0.6)
    gc.collect()
    assert len(TRIES) == tries, f"the abandoned workflow ran again: {Counter(TRIES[tries:])}"
    assert elapsed < ENDS_WITHIN_S, f"the step waited {elapsed:.1f} s for the stubborn rollout"
    assert (t0.error, t2.error) == (None, None) and (t0.reward, t2.reward) == (1.0, 1.0)
    assert t1.reward is None and t1.error.startswith("Timeout: ")
    for says in ("rollout.rollout_timeout", "abandoned", "BaseException"):
        assert says in t1.error, t1.error
    assert not [t for t in threading.enumerate() if t.name == "astuner-loop-watchdog"]


def test_an_abandoned_rollout_leaves_no_tracer_behind(make_runner) -> None:
    before = sys.gettrace()
    run_stubborn(make_runner, BlocksAndCatchesEverything)
    assert sys.gettrace() is before
