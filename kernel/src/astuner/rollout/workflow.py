"""The two workflow forms, and how config names one.

1. A `Workflow` subclass with `async execute(workflow_task, model_tuner)`
   (the seeds' `agentscope_execute` is accepted too, and so is the first
   tutorials' `agentscope_execute(init_messages, astune_proxy, config)`,
   which may return the proxy and leave the verdict to the judge).
2. A plain `async def workflow(task, model, auxiliary_models=None)`, the
   AgentScope Tuner form, where `task` is the task's row as a dict.

Either returns a `WorkflowOutput` (a dict of its fields, a bare float
reward, or AgentScope Tuner's own `WorkflowOutput` is accepted).
`rollout.agentscope_workflow` names it: a registered workflow or an import
string `pkg.mod->Name`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from astuner import compat
from astuner.core.task import Task, WorkflowOutput, WorkflowTask
from astuner.errors import AstunerError, ConfigError
from astuner.protocols import DeclaresTrainableTargets, ExecutesTasks, ExecutesTasksAsSeeds
from astuner.rollout.model_tuner import ModelTuner

if TYPE_CHECKING:
    from astuner.plugins import Plugins

WorkflowFn = Callable[["WorkflowTask", "ModelTuner"], Awaitable[WorkflowOutput]]


@dataclass
class LoadedWorkflow:
    """A workflow in any form, as the runner calls it."""

    run: WorkflowFn
    trainable_targets: list[str] = field(default_factory=list)


class Workflow(BaseModel):
    """Base class of class-form workflows: implement `execute`.

    A workflow is the user's own class: `execute` may keep anything on it
    (`self.agent = ReActAgent(...)`), as the tutorials do.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="allow")

    name: str = "workflow"
    trainable_targets: list[str] = []

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        raise NotImplementedError(
            f"{type(self).__name__} must implement async execute(workflow_task, model_tuner)"
        )


def task_as_dict(task: Task) -> dict[str, Any]:
    """The row a function-form workflow sees: the raw fields plus `task_id` and the query."""
    row = {"task_id": task.task_id, "main_query": task.main_query, **task.metadata}
    row.setdefault("question", task.main_query)
    return row


def look_alike_fields(value: BaseModel, model: type[BaseModel]) -> dict[str, Any]:
    """The fields of `model` that a look-alike from another library sets (None counts as unset)."""
    fields = {name: getattr(value, name, None) for name in model.model_fields}
    return {name: field_value for name, field_value in fields.items() if field_value is not None}


def as_workflow_output(value: Any, where: str) -> WorkflowOutput:
    """Accept a `WorkflowOutput`, a dict of its fields, a bare float reward, or a look-alike.

    A look-alike is another library's output model with some of the same
    fields (AgentScope Tuner's `WorkflowOutput`: reward, response, metrics).
    A model handle returned by a first-tutorials workflow means: no reward,
    the judge decides from what the workflow registered on the handle.
    """
    if isinstance(value, WorkflowOutput):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return WorkflowOutput(reward=float(value))
    if isinstance(value, ModelTuner):
        return WorkflowOutput()
    if isinstance(value, BaseModel):
        value = look_alike_fields(value, WorkflowOutput)
    if isinstance(value, dict):
        try:
            return WorkflowOutput(**value)
        except ValidationError as exc:
            raise AstunerError(f"{where} returned a dict that is not a WorkflowOutput: {exc}") from exc
    raise AstunerError(f"{where} returned {type(value).__name__}; return a WorkflowOutput.")


def check_function_signature(
    fn: Callable[..., Any], required: tuple[str, ...], optional: tuple[str, ...], what: str
) -> None:
    """A function-form workflow or judge must take exactly these parameter names."""
    params = inspect.signature(fn).parameters
    names = list(params)
    missing = [n for n in required if n not in params]
    extra = [
        n for n, p in params.items()
        if n not in required + optional or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]  # fmt: skip
    if missing or extra:
        allowed = ", ".join([*required, *(f"{o}=None" for o in optional)])
        raise ConfigError(
            f"The {what} {getattr(fn, '__qualname__', fn)}({', '.join(names)}) has the wrong "
            f"parameters: it must be async def {what}({allowed})."
            + (f" Missing: {', '.join(missing)}." if missing else "")
            + (f" Not allowed: {', '.join(extra)}." if extra else "")
        )
    if not inspect.iscoroutinefunction(fn):
        raise ConfigError(f"The {what} {fn.__qualname__} must be declared with 'async def'.")


def adapt_workflow(obj: Any, where: str) -> LoadedWorkflow:
    """Turn any accepted workflow form into `async fn(workflow_task, model_tuner)`."""
    if inspect.isclass(obj):
        try:
            obj = obj()
        except TypeError as exc:
            raise ConfigError(f"Cannot create the workflow {where} with no arguments: {exc}") from exc
        except Exception as exc:
            raise ConfigError(
                f"The workflow {where} raised while it was being created ({obj.__name__}()): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    method = obj.execute if isinstance(obj, ExecutesTasks) else None
    inherited = isinstance(obj, Workflow) and type(obj).execute is Workflow.execute
    if (method is None or inherited) and isinstance(obj, ExecutesTasksAsSeeds):
        method = obj.agentscope_execute  # the seeds' name for it
    if method is not None and not inspect.isfunction(obj):
        first_form = list(inspect.signature(method).parameters)[:1] == ["init_messages"]

        async def run_method(workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
            if first_form:
                compat.emit_notices([compat.FIRST_FORM_NOTICE.format(name=type(obj).__name__)])
                result = method(compat.initial_messages(workflow_task), model_tuner, workflow_task.config)
            else:
                result = method(workflow_task, model_tuner)
            return as_workflow_output(await result, where)

        targets = obj.trainable_targets if isinstance(obj, DeclaresTrainableTargets) else None
        return LoadedWorkflow(run_method, list(targets or []))
    if callable(obj):
        check_function_signature(obj, ("task", "model"), ("auxiliary_models",), "workflow")
        takes_aux = "auxiliary_models" in inspect.signature(obj).parameters

        async def run_function(workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
            kwargs: dict[str, Any] = {"task": task_as_dict(workflow_task.task), "model": model_tuner}
            if takes_aux:
                kwargs["auxiliary_models"] = model_tuner.auxiliary_models
            return as_workflow_output(await obj(**kwargs), where)

        return LoadedWorkflow(run_function)
    raise ConfigError(
        f"The workflow {where} is neither a Workflow (with async execute) nor an async function."
    )


def load_workflow(name: str | None, plugins: Plugins, search_paths: Sequence[Path] = ()) -> LoadedWorkflow:
    """The workflow `name` names, ready to call: a backbone passes `config.rollout.agentscope_workflow`,
    and the run's `config.search_paths()`, where an import string is looked for."""
    if not name:
        raise ConfigError(
            "No workflow configured: set rollout.agentscope_workflow to a registered workflow "
            "or an import string such as 'my_package.workflow->MathAgentWorkflow'."
        )
    reg = plugins.get("workflow", name, search_paths=search_paths)
    obj = reg.factory if reg.plugin.startswith("import:") else reg.build()
    return adapt_workflow(obj, f"'{name}'")
