"""The runner keeps going whatever a workflow does, and runs many rollouts at once."""

import asyncio
import time

import pytest

from astuner import Task, Workflow, WorkflowOutput
from astuner.core.tracker import TrackerSettings
from astuner.errors import AstunerError
from astuner.rollout.engine import SamplingParams
from astuner.rollout.runner import RunnerSettings

SAMPLING = SamplingParams(temperature=1.0, max_tokens=64)


def tasks(n: int) -> list[Task]:
    return [Task(task_id=f"t{i}", main_query=f"Say {i}.", metadata={"answer": str(i)}) for i in range(n)]


def say_the_number(prompt: str) -> str:
    return prompt.rsplit("Say ", 1)[1].split(".", 1)[0]


class SayWorkflow(Workflow):
    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        if workflow_task.task.task_id == "t1":
            raise ValueError("workflow bug in t1")
        if workflow_task.task.task_id == "t2":
            await asyncio.sleep(60)
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})


def test_raising_and_hanging_workflows_are_recorded_and_the_rest_go_on(make_runner) -> None:
    runner, _ = make_runner(SayWorkflow, say_the_number, settings=RunnerSettings(rollout_timeout=0.5))
    t0, t1, t2, t3 = asyncio.run(runner.run(tasks(4), SAMPLING, progress=False))
    assert (t0.reward, t0.error) == (1.0, None) and (t3.reward, t3.error) == (1.0, None)
    assert "ValueError: workflow bug in t1" in t1.error and "Traceback" in t1.error
    assert t1.reward is None
    assert t2.error.startswith("Timeout: the rollout ran longer than 0.5 s") and t2.reward is None


class SwallowsCancellation(Workflow):
    """As an agent that catches CancelledError and carries on (AgentScope 2.x does by default)."""

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})


def test_a_workflow_that_swallows_its_cancellation_is_still_a_timeout(make_runner) -> None:
    runner, _ = make_runner(
        SwallowsCancellation, say_the_number, settings=RunnerSettings(rollout_timeout=0.2)
    )
    (late,) = asyncio.run(runner.run(tasks(1), SAMPLING, progress=False))
    assert late.error.startswith("Timeout: the rollout ran longer than 0.2 s") and late.reward is None
    assert "caught the cancellation" in late.error


def test_groups_and_64_rollouts_in_flight(make_runner) -> None:
    runner, engine = make_runner(
        SayWorkflow, say_the_number, settings=RunnerSettings(max_env_worker=64), delay=0.05
    )
    work = [t for t in tasks(18) if t.task_id not in ("t1", "t2")]
    trajectories = asyncio.run(runner.run(work[:16], SAMPLING, num_repeat=4, progress=False))
    assert len(trajectories) == 64
    assert engine.peak_in_flight == 64
    assert all(t.error is None and t.reward == 1.0 for t in trajectories)
    groups = [t.group_id for t in trajectories]
    assert len(set(groups)) == 16 and all(groups.count(g) == 4 for g in set(groups))
    assert len({t.trajectory_id for t in trajectories}) == 64


def test_max_env_worker_bounds_concurrency(make_runner) -> None:
    runner, engine = make_runner(
        SayWorkflow, say_the_number, settings=RunnerSettings(max_env_worker=3), delay=0.02
    )
    asyncio.run(runner.run(tasks(1), SAMPLING, num_repeat=10, progress=False))
    assert engine.peak_in_flight == 3


def test_max_env_worker_bounds_concurrent_runs_together(make_runner) -> None:
    """Two batches run side by side (asynchronous rollouts, validation) share the runner's bound."""
    runner, engine = make_runner(
        SayWorkflow, say_the_number, settings=RunnerSettings(max_env_worker=3), delay=0.02
    )

    async def two_batches() -> None:
        await asyncio.gather(
            runner.run(tasks(1), SAMPLING, num_repeat=6, tag="a", progress=False),
            runner.run(tasks(1), SAMPLING, num_repeat=6, tag="b", progress=False),
        )

    asyncio.run(two_batches())
    asyncio.run(two_batches())  # a new event loop gets slots of its own
    assert engine.peak_in_flight == 3


class LongConversation(Workflow):
    """Keeps talking until the model handle says the context is full."""

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        messages = [{"role": "user", "content": "Start."}]
        for _ in range(50):
            call = await model_tuner.chat(messages)
            if model_tuner.context_overflow:
                break
            messages += [
                {"role": "assistant", "content": call.content},
                {"role": "user", "content": "More " * 40},
            ]
        return WorkflowOutput(reward=float(len(messages)))


def test_context_overflow_stops_the_loop_without_raising(make_runner) -> None:
    tracker = TrackerSettings(max_model_len=400, max_response_length_in_one_turn=32)
    runner, engine = make_runner(
        LongConversation, lambda prompt: "ok", settings=RunnerSettings(tracker=tracker)
    )
    (trajectory,) = asyncio.run(runner.run(tasks(1), SAMPLING, progress=False))
    assert trajectory.error is None
    last = trajectory.calls[-1]
    assert last.finish_reason == "context_overflow" and not last.trainable and last.response_ids == []
    assert trajectory.tracker.context_overflows == 1
    assert engine.calls == len(trajectory.calls) - 1
    assert all(len(c.prompt_ids) + 32 <= 400 for c in trajectory.calls[:-1])


class ScoreIsTheTask:
    """A judge whose verdict is whatever the task's metadata says: NaN, inf, a list with NaN, or 1."""

    def compute_reward(self, workflow_task, workflow_output):
        return workflow_task.task.metadata["score"], True


def test_a_non_finite_reward_is_a_rollout_error_naming_judge_and_task(make_runner, capsys) -> None:
    from astuner.logs import configure_logging
    from astuner.rollout.judging import AdaptedJudge

    configure_logging()
    scores = [float("nan"), float("inf"), [1.0, float("nan")], 1.0]
    batch = [Task(task_id=f"s{i}", main_query="Say 1.", metadata={"score": s}) for i, s in enumerate(scores)]
    runner, _ = make_runner(SayWorkflow, say_the_number)
    runner.judge = AdaptedJudge(ScoreIsTheTask(), "'my_judges->ScoreIsTheTask'")
    nan, inf, listed, fine = asyncio.run(runner.run(batch, SAMPLING, progress=False))
    for trajectory, shown in ((nan, "nan"), (inf, "inf"), (listed, "[1.0, nan]")):
        assert trajectory.reward is None and trajectory.is_success is None
        judge = "The judge 'my_judges->ScoreIsTheTask'"
        assert f"{judge} returned a non-finite reward ({shown})" in trajectory.error
        assert f"for task '{trajectory.task_id}'" in trajectory.error
    assert (fine.reward, fine.error) == (1.0, None)
    assert capsys.readouterr().err.count("non-finite reward") == 3


class FirstEndsTheRestWait(Workflow):
    """t0 ends at once; the others would run for a minute."""

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        if workflow_task.task.task_id != "t0":
            await asyncio.sleep(60)
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(response=call.content)


def test_a_rollout_file_that_cannot_be_written_stops_the_batch_at_once(make_runner, tmp_path) -> None:
    runner, _ = make_runner(FirstEndsTheRestWait, say_the_number)
    (tmp_path / "rollouts").write_text("a file where the folder should be")
    record = tmp_path / "rollouts" / "step_1.jsonl"

    async def batch() -> set[asyncio.Task]:
        with pytest.raises(AstunerError, match=r"Cannot write records to .*step_1\.jsonl"):
            await runner.run(tasks(3), SAMPLING, progress=False, record=record)
        return asyncio.all_tasks() - {asyncio.current_task()}

    began = time.monotonic()
    assert asyncio.run(batch()) == set()  # the two waiting runs were cancelled when run() raised
    assert time.monotonic() - began < 10
