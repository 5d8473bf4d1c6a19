"""The workflow and judge given to `tune()` as Python objects, made into a plugin of this process.

The config names its workflow and judge by a string: a registered name or
an import string. A function handed to `tune()` may live only in this
process (a script's `__main__`, a notebook cell), so `tune()` registers it
in the run's plugin manager under a name of its own,
`tune/<module>.<qualified name>`, and the config names that. Backbones that
run workflows in this process (`torch`, `debug`) find it as they find an
installed plugin's workflow, and `config.yaml` in the run folder says which
function ran. Worker processes (`rollout.executor: ray`, the verl and Trinity
engines) load workflows by import string, so `check()` refuses them.

Both are checked when the plugin is built, before any model loads: a
function must take exactly the parameters of its form (see
`astuner.rollout.workflow` and `astuner.rollout.judging`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from astuner.errors import ConfigError
from astuner.hookspecs import Register, hookimpl
from astuner.rollout.judging import AdaptedJudge
from astuner.rollout.workflow import adapt_workflow

PREFIX = "tune/"
# Backbones whose workflows run in their engine's worker processes, which read the
# run's config.yaml afresh: a name registered in this process means nothing there.
WORKER_BACKBONES = ("verl", "trinity")


def registered_name(obj: Any) -> str:
    """`tune/<module>.<qualified name>` of a function, class or object."""
    named = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{PREFIX}{getattr(named, '__module__', None) or 'unknown'}.{named.__qualname__}"


def _not_a_string(obj: Any, argument: str, key: str) -> None:
    if isinstance(obj, str):
        raise ConfigError(
            f"tune({argument}={obj!r}): pass the function itself, not its name. To name it by import "
            f"string, set {key} in the YAML given as config_path and run `astuner run`."
        )


class TuneFunctions:
    """A plugin that registers one workflow (and one judge) given as Python objects."""

    def __init__(
        self, workflow_func: Callable[..., Any], judge_func: Callable[..., Any] | None = None
    ) -> None:
        _not_a_string(workflow_func, "workflow_func", "rollout.agentscope_workflow")
        _not_a_string(judge_func, "judge_func", "task_judge.judge_protocol")
        self.workflow_name = registered_name(workflow_func)
        adapt_workflow(workflow_func, f"'{self.workflow_name}'")
        self.workflow = workflow_func
        self.judge_name = registered_name(judge_func) if judge_func is not None else None
        self.judge = AdaptedJudge(judge_func, f"'{self.judge_name}'") if judge_func is not None else None
        self.plugin_name = f"tune-functions-{id(self)}"

    def config(self) -> dict[str, Any]:
        """The config values naming these functions."""
        values: dict[str, Any] = {"rollout": {"agentscope_workflow": self.workflow_name}}
        if self.judge_name is not None:
            values["task_judge"] = {"judge_protocol": self.judge_name}
        return values

    def check(self, backbone: str, executor: str) -> None:
        """Objects of this process cannot run where the config sends workflows elsewhere: `backbone` and
        `executor` are the config's `backbone` and `rollout.executor`."""
        if backbone in WORKER_BACKBONES:
            raise ConfigError(
                f"backbone '{backbone}' runs each workflow in its engine's worker processes, which "
                f"load it from the run's config.yaml by import string; the workflow given to tune() "
                f"({self.workflow_name}) lives in this process only. Use backbone 'torch' or 'debug', or "
                "name the workflow and judge by import string in a YAML config and run `astuner run`."
            )
        if executor == "ray":
            raise ConfigError(
                "rollout.executor is 'ray', which runs each workflow in a Ray worker that loads it by "
                f"import string; the workflow given to tune() ({self.workflow_name}) lives in this process "
                "only. Use rollout.executor: local, or name the workflow by import string in a YAML "
                "config and run `astuner run`."
            )

    @hookimpl
    def register_workflows(self, register: Register) -> None:
        register(self.workflow_name, lambda: self.workflow, summary="The workflow given to astuner.tune().")

    @hookimpl
    def register_judges(self, register: Register) -> None:
        if self.judge is not None and self.judge_name is not None:
            register(self.judge_name, lambda: self.judge, summary="The judge given to astuner.tune().")
