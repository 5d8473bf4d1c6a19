"""The judge forms, all turned into `async judge(task, output) -> JudgeOutput`.

- a registered judge (`task_judge.judge_protocol: exact`): already that shape;
- a judge class or object from an import string: `judge(task, output)`
  (sync or async), or the seeds' `compute_reward(workflow_task, workflow_output)`
  returning `(reward, is_success)`, or the first tutorials'
  `compute_reward(judge_input_dictionary)` (see `astuner.compat.judge_input_dictionary`);
- a plain `async def judge(task, response, auxiliary_models=None)` (the
  AgentScope Tuner form), where `task` is the row dict and `response` the
  workflow's `response`, and `auxiliary_models` the rollout's handles of the
  configured auxiliary models (`astuner.rollout.auxiliary`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from astuner import compat
from astuner.core.task import JudgeOutput, Task, WorkflowOutput, WorkflowTask
from astuner.errors import AstunerError, ConfigError
from astuner.import_strings import is_import_string
from astuner.protocols import ComputesReward, Judge
from astuner.rollout.workflow import check_function_signature, look_alike_fields, task_as_dict

if TYPE_CHECKING:
    from astuner.plugins import Plugins


def as_judge_output(value: Any, where: str) -> JudgeOutput:
    """Accept a `JudgeOutput`, a dict of its fields, a `(reward, is_success)` pair, a float,
    or a look-alike (AgentScope Tuner's `JudgeOutput`: reward, metrics)."""
    if isinstance(value, JudgeOutput):
        return value
    if isinstance(value, BaseModel):
        value = look_alike_fields(value, JudgeOutput)
    if isinstance(value, dict):
        return JudgeOutput(**value)
    if isinstance(value, tuple) and len(value) == 2:
        return JudgeOutput(reward=value[0], is_success=bool(value[1]))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return JudgeOutput(reward=float(value), is_success=value > 0)
    raise AstunerError(f"The judge {where} returned {type(value).__name__}; return a JudgeOutput.")


class AdaptedJudge:
    """Any accepted judge form behind the `Judge` protocol."""

    def __init__(self, obj: Any, where: str) -> None:
        self.where = where
        self._method: Callable[..., Any] | None = None
        if isinstance(obj, Judge):
            self._method = obj.judge
        elif isinstance(obj, ComputesReward):
            self._method = obj.compute_reward
        self._function = None
        self._takes_dictionary = False
        # The seeds' compute_reward(workflow_task, workflow_output) reads workflow_task.task, .gym_env, ...
        self._takes_workflow_task = not isinstance(obj, Judge)
        if self._method is None or inspect.isfunction(obj):
            if not callable(obj):
                raise ConfigError(f"The judge {where} has no judge()/compute_reward() and is not callable.")
            check_function_signature(obj, ("task", "response"), ("auxiliary_models",), "judge")
            self._function, self._method = obj, None
        else:
            self._takes_dictionary = list(inspect.signature(self._method).parameters) == [
                "judge_input_dictionary"
            ]

    async def judge_rollout(self, workflow_task: WorkflowTask, output: WorkflowOutput) -> JudgeOutput:
        """The verdict on one rollout: a function judge gets that rollout's auxiliary models."""
        if self._takes_dictionary:
            if output.reward is not None:  # the workflow decided; the first tutorials skip the judge
                return JudgeOutput(reward=output.reward, is_success=bool(output.is_success))
            assert self._method is not None
            value = self._method(compat.judge_input_dictionary(workflow_task, output))
            return as_judge_output(await value if inspect.isawaitable(value) else value, self.where)
        if self._method is not None and self._takes_workflow_task:
            value = self._method(workflow_task, output)
            return as_judge_output(await value if inspect.isawaitable(value) else value, self.where)
        return await self.judge(workflow_task.task, output, workflow_task.auxiliary_models)

    async def judge(
        self, task: Task, output: WorkflowOutput, auxiliary_models: dict[str, Any] | None = None
    ) -> JudgeOutput:
        if self._takes_dictionary or (self._method is not None and self._takes_workflow_task):
            return await self.judge_rollout(WorkflowTask(task=task), output)
        if self._function is not None:
            kwargs: dict[str, Any] = {"task": task_as_dict(task), "response": output.response}
            if "auxiliary_models" in inspect.signature(self._function).parameters:
                kwargs["auxiliary_models"] = auxiliary_models or {}
            value = await self._function(**kwargs)
        else:
            assert self._method is not None
            value = self._method(task, output)
            if inspect.isawaitable(value):
                value = await value
        return as_judge_output(value, self.where)


def load_judge(
    name: str,
    plugins: Plugins,
    search_paths: Sequence[Path],
    *,
    build_registered: Callable[[], Judge],
    judge_config: object = None,
) -> Judge:
    """The judge `name` (`task_judge.judge_protocol`) names, in any accepted form.

    A registered judge is built by `build_registered` (the launch path's
    `astuner.components.build_judge`, bound to the run: it gets its settings
    block); an import string is resolved from `search_paths`, and a judge
    class there that takes an argument is created with `judge_config`, the
    run's config, as the first tutorials' judges expect.
    """
    if not is_import_string(name):
        return build_registered()
    obj = plugins.get("judge", name, search_paths=search_paths).factory
    if inspect.isclass(obj):
        try:
            obj = obj()
        except TypeError:
            obj = obj(judge_config)
    return AdaptedJudge(obj, f"'{name}'")
