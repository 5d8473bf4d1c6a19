"""A workflow that blocks the event loop is cut at the rollout timeout, and signals still stop the run."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from astuner import Task, Workflow, WorkflowOutput
from astuner.rollout.engine import SamplingParams
from astuner.rollout.runner import RunnerSettings

SAMPLING = SamplingParams(temperature=1.0, max_tokens=64)
WATCHED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


def tasks(n: int) -> list[Task]:
    return [Task(task_id=f"t{i}", main_query=f"Say {i}.", metadata={"answer": str(i)}) for i in range(n)]


def say_the_number(prompt: str) -> str:
    return prompt.rsplit("Say ", 1)[1].split(".", 1)[0]


class SleepsInT1(Workflow):
    """t1 calls time.sleep(30) in async code (after a short real await); the others answer."""

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        if workflow_task.task.task_id == "t1":
            await asyncio.sleep(0.2)
            time.sleep(30)  # the bug: blocks the event loop
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})


def handlers() -> dict[int, object]:
    return {sig: signal.getsignal(sig) for sig in WATCHED}


def watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "astuner-loop-watchdog"]


@pytest.mark.parametrize("parallel", [1, 4])
def test_a_workflow_blocking_the_loop_is_cut_at_the_timeout_and_the_rest_go_on(make_runner, parallel) -> None:
    before = handlers()
    runner, _ = make_runner(
        SleepsInT1,
        say_the_number,
        settings=RunnerSettings(rollout_timeout=1.0, max_env_worker=parallel),
        delay=0.01,
    )
    started = time.monotonic()
    t0, t1, t2, t3 = asyncio.run(runner.run(tasks(4), SAMPLING, progress=False))
    elapsed = time.monotonic() - started
    assert elapsed < 5, f"the blocked rollout was cut after {elapsed:.1f} s"
    for fine in (t0, t2, t3):
        assert (fine.reward, fine.error) == (1.0, None)
    assert t1.reward is None
    assert t1.error.startswith("Timeout: the workflow blocked the event loop for ")
    for hint in ("time.sleep", "asyncio.to_thread", "rollout.rollout_timeout"):
        assert hint in t1.error
    assert "time.sleep(30)  # the bug" in t1.error  # where it blocked
    assert handlers() == before and not watchdog_threads()


class BriefSleep(Workflow):
    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        time.sleep(1.5)  # blocks, but well within the timeout
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})


def test_a_blocking_call_within_the_timeout_is_left_alone(make_runner) -> None:
    runner, _ = make_runner(BriefSleep, say_the_number, settings=RunnerSettings(rollout_timeout=5.0))
    (trajectory,) = asyncio.run(runner.run(tasks(1), SAMPLING, progress=False))
    assert (trajectory.reward, trajectory.error) == (1.0, None)


class Answers(Workflow):
    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})


class SlowJudge:
    """A judge that blocks the loop past the rollout timeout: outside the rollout, never interrupted."""

    def compute_reward(self, workflow_task, workflow_output):
        time.sleep(1.6)
        return 1.0, True


def test_code_outside_the_workflow_is_never_interrupted(make_runner) -> None:
    from astuner.rollout.judging import AdaptedJudge

    runner, _ = make_runner(Answers, say_the_number, settings=RunnerSettings(rollout_timeout=1.0))
    runner.judge = AdaptedJudge(SlowJudge(), "SlowJudge")
    (trajectory,) = asyncio.run(runner.run(tasks(1), SAMPLING, progress=False))
    assert (trajectory.reward, trajectory.error) == (1.0, None)


class AnswersAndLooks(Answers):
    """Also notes the SIGINT handler and the watchdog thread seen while the rollout runs."""

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        output = await super().execute(workflow_task, model_tuner)
        output.metadata["sigint"] = repr(signal.getsignal(signal.SIGINT))
        output.metadata["watched"] = bool(watchdog_threads())
        return output


def test_a_normal_run_passes_and_leaves_no_trace(make_runner) -> None:
    before = handlers()
    runner, _ = make_runner(
        AnswersAndLooks, say_the_number, settings=RunnerSettings(max_env_worker=16), delay=0.3
    )
    trajectories = asyncio.run(runner.run(tasks(8), SAMPLING, num_repeat=4, progress=False))
    assert all(t.error is None and t.reward == 1.0 for t in trajectories)
    for t in trajectories:
        seen = t.metadata["workflow_output"]["metadata"]
        # watched, but a library caller's own SIGINT handling is left alone (only the CLI hands it over)
        assert seen["watched"] is True and "StopSignals" not in seen["sigint"]
    assert handlers() == before and not watchdog_threads()


def test_a_runner_outside_the_main_thread_runs_as_before(make_runner) -> None:
    runner, _ = make_runner(Answers, say_the_number)
    result: dict[str, object] = {}

    def work() -> None:
        result["trajectories"] = asyncio.run(runner.run(tasks(3), SAMPLING, progress=False))

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(30)
    assert all(t.error is None and t.reward == 1.0 for t in result["trajectories"])


# -- the real command line, stopped by signals ---------------------------------------------------

BLOCKING_WORKFLOW = """
import pathlib
import time

async def answer(task, model):
    pathlib.Path("blocked").write_text(task["question"])
    time.sleep(600)
"""

STUBBORN_WORKFLOW = """
import pathlib
import time

async def answer(task, model):
    pathlib.Path("blocked").write_text(task["question"])
    while True:
        try:
            time.sleep(600)
        except BaseException:
            pass  # swallows everything, KeyboardInterrupt included
"""


def start_debug_run(folder: Path, workflow: str) -> subprocess.Popen[str]:
    """`astuner run --conf conf.yaml --backbone debug` on `workflow`; returns once it blocks."""
    (folder / "flow.py").write_text(textwrap.dedent(workflow))
    config = {
        "astuner": {
            "task_reader": {"type": "arith"},
            # The workflow never calls the model: a chat engine with nothing behind it loads nothing.
            "rollout": {
                "agentscope_workflow": "flow->answer",
                "engine": "openai",
                "engine_url": "http://127.0.0.1:9/v1",
            },
            "debug": {"debug_first_n_tasks": 3},
        }
    }
    (folder / "conf.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    env["ASTUNER_LOAD_PLUGINS"] = "engine_openai"  # the kernel's own plugins and the engine: a quicker start

    def default_signals() -> None:  # a test runner in the background may have SIGINT ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    process = subprocess.Popen(
        [sys.executable, "-m", "astuner", "run", "--conf", "conf.yaml", "--backbone", "debug"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 60
    while not (folder / "blocked").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            out, err = process.communicate()
            pytest.fail(f"the run never reached the workflow:\n{out}\n{err}")
        time.sleep(0.05)
    time.sleep(0.3)  # well inside time.sleep now
    return process


def finish(process: subprocess.Popen[str], timeout: float) -> tuple[float, str]:
    started = time.monotonic()
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"still running {timeout} s after the signal:\n{err}")
    return time.monotonic() - started, err


def test_sigterm_stops_a_run_whose_workflow_blocks_the_loop(tmp_path: Path) -> None:
    process = start_debug_run(tmp_path, BLOCKING_WORKFLOW)
    process.send_signal(signal.SIGTERM)
    _, err = finish(process, timeout=10)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM received, stopping the run" in err
    assert "interrupting it" in err


def test_sigint_stops_a_run_whose_workflow_blocks_the_loop(tmp_path: Path) -> None:
    process = start_debug_run(tmp_path, BLOCKING_WORKFLOW)
    process.send_signal(signal.SIGINT)
    _, err = finish(process, timeout=10)
    assert process.returncode == 130, err
    assert "SIGINT received, stopping the run" in err


def test_a_second_sigint_exits_at_once_even_when_everything_is_stuck(tmp_path: Path) -> None:
    process = start_debug_run(tmp_path, STUBBORN_WORKFLOW)
    process.send_signal(signal.SIGINT)
    time.sleep(2.5)  # the stop has interrupted it twice by now, in vain
    assert process.poll() is None, "the stubborn workflow should keep the run stuck"
    process.send_signal(signal.SIGINT)
    elapsed, err = finish(process, timeout=5)
    assert process.returncode == 130, err
    assert elapsed < 1.5
    assert "SIGINT received, stopping the run" in err
    assert "astuner: second SIGINT: exiting now" in err
