"""Entry point of `astuner-executor-ray`: executor `ray`.

Importing this module is cheap: Ray, the gateway client and the executor
load only when a run uses `rollout.executor: ray`.
"""

from __future__ import annotations

from typing import Any

from astuner.api import Register, hookimpl
from astuner.training import WorkflowSource


def ray_executor(workflow_source: WorkflowSource) -> Any:
    """The Ray executor of a run (imported here: it loads httpx and the gateway)."""
    from astuner_executor_ray.executor import RayExecutor

    return RayExecutor(workflow_source)


@hookimpl
def register_executors(register: Register) -> None:
    register(
        "ray",
        ray_executor,
        summary="Each rollout's workflow as a Ray task (RAY_ADDRESS, else a local cluster); "
        "model calls come back through the gateway.",
    )
