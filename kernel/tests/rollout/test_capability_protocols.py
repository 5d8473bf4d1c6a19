"""Optional capabilities are told by the runtime-checkable protocols of `astuner.protocols`.

Never probed by name: each protocol recognises an object with the
capability and refuses one without it; the runner and the model handle
then act on exactly that answer.
"""

import asyncio
from typing import Any

from pydantic import Field

from astuner import Task, Workflow, WorkflowOutput
from astuner.core.task import JudgeOutput
from astuner.protocols import Closes, ClosesAsync, NamesItsOrigin, StepsAsync
from astuner.rollout.engine import SamplingParams

SAMPLING = SamplingParams(temperature=1.0, max_tokens=64)
TASK = Task(task_id="t", main_query="Say 1.", metadata={"answer": "1"})


class SyncEnv:
    """An environment with `step` and `close` only."""

    def __init__(self) -> None:
        self.closed = 0
        self.actions: list[Any] = []

    def step(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        self.actions.append(action)
        return f"saw {action}", 0.5, False, {}

    def close(self) -> None:
        self.closed += 1


class AsyncEnv(SyncEnv):
    """An environment that also steps and closes without blocking the loop."""

    def __init__(self) -> None:
        super().__init__()
        self.aclosed = 0
        self.asteps = 0

    async def astep(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        self.asteps += 1
        return f"awaited {action}", 1.0, True, {}

    async def aclose(self) -> None:
        self.aclosed += 1


class Bare:
    """Has none of the capabilities."""


class Origin:
    where = "'my_judges->Origin'"


def test_each_protocol_tells_an_object_with_the_capability_from_one_without() -> None:
    assert isinstance(SyncEnv(), Closes) and not isinstance(Bare(), Closes)
    assert isinstance(AsyncEnv(), StepsAsync)
    assert not isinstance(SyncEnv(), StepsAsync) and not isinstance(Bare(), StepsAsync)
    assert isinstance(AsyncEnv(), ClosesAsync) and not isinstance(SyncEnv(), ClosesAsync)
    assert isinstance(Origin(), NamesItsOrigin) and not isinstance(Bare(), NamesItsOrigin)


class StepsOnce(Workflow):
    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        await model_tuner.agym_step(call.content)
        return WorkflowOutput(response=call.content, metadata={"final_answer": call.content})


def run_with_env(make_runner, env: Any) -> Any:
    runner, _ = make_runner(StepsOnce, lambda prompt: "1")
    runner.gym_env_factory = lambda task: env
    (trajectory,) = asyncio.run(
        runner.run(
            [Task(task_id="t", main_query="Say 1.", metadata={"answer": "1"})], SAMPLING, progress=False
        )
    )
    assert trajectory.error is None
    return trajectory


def test_an_environment_that_steps_and_closes_async_is_awaited_and_never_closed_twice(make_runner) -> None:
    env = AsyncEnv()
    trajectory = run_with_env(make_runner, env)
    assert env.asteps == 1 and env.actions == []
    assert (env.aclosed, env.closed) == (1, 0)
    assert trajectory.metadata["env_steps"] == [{"call_index": 0, "reward": 1.0, "terminated": True}]


def test_a_sync_environment_is_stepped_and_closed_directly(make_runner) -> None:
    env = SyncEnv()
    trajectory = run_with_env(make_runner, env)
    assert env.actions == ["1"] and env.closed == 1
    assert trajectory.metadata["step_rewards"] == [0.5]


class StepsOnly:
    """An environment that can be stepped but holds nothing to release."""

    def step(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        return "ok", 0.0, True, {}


def test_an_environment_without_close_is_left_as_it_is(make_runner) -> None:
    assert not isinstance(StepsOnly(), Closes | ClosesAsync)
    assert run_with_env(make_runner, StepsOnly()).metadata["step_rewards"] == [0.0]


class NanJudge:
    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        return JudgeOutput(reward=float("nan"), is_success=False)


class NamedNanJudge(NanJudge):
    where = "'my_judges->NamedNanJudge'"


def test_the_runner_names_a_judge_by_its_origin_or_else_its_class(make_runner) -> None:
    errors = []
    for judge in (NanJudge(), NamedNanJudge()):
        runner, _ = make_runner(StepsOnce, lambda prompt: "1")
        runner.gym_env_factory = lambda task: SyncEnv()
        runner.judge = judge
        (trajectory,) = asyncio.run(runner.run([TASK], SAMPLING, progress=False))
        errors.append(trajectory.error)
    assert errors[0].startswith("The judge NanJudge returned a non-finite reward")
    assert errors[1].startswith("The judge 'my_judges->NamedNanJudge' returned a non-finite reward")


class SeedJudge:
    def compute_reward(self, workflow_task, workflow_output):
        return 1.0, True


class BothJudge(SeedJudge):
    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        return JudgeOutput(reward=0.25, is_success=False)


def test_a_judge_form_is_told_by_protocol_and_judge_wins_over_compute_reward() -> None:
    from astuner.protocols import ComputesReward, Judge
    from astuner.rollout.judging import AdaptedJudge

    assert isinstance(SeedJudge(), ComputesReward) and not isinstance(SeedJudge(), Judge)
    assert not isinstance(Bare(), ComputesReward)
    verdict = asyncio.run(AdaptedJudge(BothJudge(), "both").judge(TASK, WorkflowOutput()))
    assert verdict.reward == 0.25
    seed = asyncio.run(AdaptedJudge(SeedJudge(), "seed").judge(TASK, WorkflowOutput()))
    assert (seed.reward, seed.is_success) == (1.0, True)


class SeedWorkflow(Workflow):
    """A `Workflow` subclass in the seeds' form: its `execute` is the inherited one that raises."""

    trainable_targets: list[str] = Field(default_factory=lambda: ["solver"])

    async def agentscope_execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        return WorkflowOutput(reward=0.5)


class PlainWorkflow:
    trainable_targets = None

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        return WorkflowOutput(reward=0.75)


def test_a_workflow_form_is_told_by_protocol() -> None:
    from astuner.protocols import DeclaresTrainableTargets, ExecutesTasks, ExecutesTasksAsSeeds
    from astuner.rollout.workflow import adapt_workflow

    seed_form, plain_form, bare = SeedWorkflow(), PlainWorkflow(), Bare()
    assert isinstance(seed_form, ExecutesTasksAsSeeds) and not isinstance(plain_form, ExecutesTasksAsSeeds)
    assert isinstance(plain_form, ExecutesTasks) and not isinstance(bare, ExecutesTasks)
    assert isinstance(seed_form, DeclaresTrainableTargets) and not isinstance(bare, DeclaresTrainableTargets)
    seed, plain = adapt_workflow(SeedWorkflow, "seed"), adapt_workflow(PlainWorkflow, "plain")
    assert (seed.trainable_targets, plain.trainable_targets) == (["solver"], [])
    assert asyncio.run(seed.run(None, None)).reward == 0.5
    assert asyncio.run(plain.run(None, None)).reward == 0.75


class Message:
    def get_text_content(self) -> str | None:
        return None


def test_a_message_that_gives_its_text_is_read_by_it() -> None:
    from astuner.core.task import HasTextContent, text_of

    assert isinstance(Message(), HasTextContent) and not isinstance(Bare(), HasTextContent)
    assert text_of(Message()) == ""
    assert text_of(Bare()).startswith("<")
