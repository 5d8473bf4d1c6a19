"""`rollout.executor: ray`: each rollout's workflow runs as a Ray task; the model stays with the runner.

The driver keeps everything that needs the model or the record: engine,
context tracker, judge, madness checks. Only the user's workflow moves to a
Ray worker, where it gets a `RemoteModelTuner` (`astuner_executor_ray.remote_tuner`)
whose calls come back through the runner's gateway, so every call is
tracked token for token in the driver exactly as in a local run. The worker
returns the `WorkflowOutput`; the driver judges it.

Cluster: the one `ray.init` already made in this process, else the cluster
at `RAY_ADDRESS`, else a new local one that stops with the process. The
gateway listens on 127.0.0.1, which workers on this machine reach; for
workers on other nodes set `ASTUNER_GATEWAY_HOST` to an address of this
machine that they can reach (e.g. its cluster IP): the runner then serves
a gateway there for the duration of each `run()`. Workers load the workflow
the run names (the `workflow_source` service: an import string, or a
workflow of an installed plugin) with the driver's search paths on
`sys.path`, so those folders must exist
at the same place on every node. Per-run environments (`gym_env_factory`)
are live objects of the driver and cannot be used by a remote workflow.
Auxiliary models can: the worker's `auxiliary_models` are `RemoteModelTuner`s
on their own gateway routes (`/rollout/<rollout_id>.<name>/...`), served
and recorded by the driver's untrainable handles.

Ray is imported only when this executor is used.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from astuner.api import AstunerError, ModelTuner, SamplingParams, Task, WorkflowOutput, WorkflowTask
from astuner.training import Gateway, Plugins, WorkflowSource, auxiliary_rollout_id
from astuner_executor_ray.remote_tuner import remote_model_tuner_class

if TYPE_CHECKING:
    from astuner.training import RolloutRunner

GATEWAY_HOST_ENV = "ASTUNER_GATEWAY_HOST"


class RemoteWorkflowError(AstunerError):
    """The workflow raised inside a Ray worker; the message carries the worker's traceback."""


# ------------------------------------------------------------------ worker side

# per worker process: run key -> the run's loaded workflow
_LOADED: dict[str, Any] = {}


def _loaded_workflow(key: str, source: WorkflowSource) -> Any:
    if key not in _LOADED:
        for folder in reversed(source.search_paths):
            if folder not in sys.path:
                sys.path.insert(0, folder)
        _LOADED[key] = source.load(Plugins())
    return _LOADED[key]


async def _run_workflow(
    key: str, source: WorkflowSource, workflow_config: object, job: dict[str, Any]
) -> WorkflowOutput:
    workflow = _loaded_workflow(key, source)
    cls = remote_model_tuner_class()
    timeout = source.rollout_timeout
    auxiliary = {
        name: cls(
            rollout_id=auxiliary_rollout_id(job["rollout_id"], name),
            gateway_url=job["gateway_url"],
            sampling=SamplingParams(**sampling),
            timeout=timeout,
            agent_name=name,
        )
        for name, sampling in job["auxiliary_sampling"].items()
    }
    tuner = cls(
        rollout_id=job["rollout_id"],
        gateway_url=job["gateway_url"],
        sampling=SamplingParams(**job["sampling"]),
        timeout=timeout,
        trainable_targets=job["trainable_targets"],
        auxiliary_models=auxiliary,
    )
    workflow_task = WorkflowTask(
        task=Task.model_validate_json(job["task"]),
        group_id=job["group_id"],
        rollout_id=job["rollout_id"],
        repeat_index=job["repeat_index"],
        config=workflow_config,
    )
    try:
        output = await workflow.run(workflow_task, tuner)
        return output.with_judge_input(tuner.judge_input)
    finally:
        for handle in (tuner, *auxiliary.values()):
            await handle.aclose()


def run_in_worker(
    key: str, source: WorkflowSource, workflow_config: object, job: dict[str, Any]
) -> tuple[WorkflowOutput | None, str | None]:
    """The Ray task: run one workflow; `(output, None)`, or `(None, traceback)` when it raised.

    `workflow_config` is what the workflow reads as `workflow_task.config`, as it would in the driver
    (the executor only hands it on).
    """
    try:
        return asyncio.run(_run_workflow(key, source, workflow_config, job)), None
    except Exception:
        return None, traceback.format_exc()


# ------------------------------------------------------------------ driver side


class RayExecutor:
    """Sends each rollout's workflow call to a Ray task; everything else stays in the runner."""

    def __init__(self, source: WorkflowSource) -> None:
        self.source = source
        self.key = uuid.uuid4().hex
        self._remote: Any = None
        self._source_ref: Any = None
        # the workflows' `workflow_task.config`, put into the object store once: (config, its reference)
        self._config_ref: tuple[Any, Any] = (None, None)

    def _connect(self) -> None:
        import ray

        if not ray.is_initialized():
            address = os.environ.get("RAY_ADDRESS") or "local"
            ray.init(address=address, include_dashboard=False, logging_level="WARNING")
        if self._remote is None:
            # A workflow is not idempotent (it may act on the world): never rerun it on a worker crash.
            self._remote = ray.remote(num_cpus=1, max_retries=0)(run_in_worker)
            self._source_ref = ray.put(self.source)

    def _config_of(self, workflow_task: WorkflowTask) -> Any:
        import ray

        config, ref = self._config_ref
        if ref is None or config is not workflow_task.config:
            self._config_ref = (workflow_task.config, ray.put(workflow_task.config))
        return self._config_ref[1]

    def _check(self, runner: RolloutRunner) -> None:
        if runner.gym_env_factory is not None:
            raise AstunerError(
                "rollout.executor: ray cannot run workflows whose tasks need a per-run environment "
                "(the environment client lives in the driver): use rollout.executor: local with this reader."
            )
        if runner.gateway is None:
            raise AstunerError("rollout.executor: ray needs the runner's gateway (rollout_stack starts it).")

    @asynccontextmanager
    async def session(self, runner: RolloutRunner) -> AsyncIterator[None]:
        """Connect to Ray; serve the gateway on `ASTUNER_GATEWAY_HOST` for remote nodes if set."""
        self._check(runner)
        self._connect()
        host = os.environ.get(GATEWAY_HOST_ENV)
        if not host or host == runner.gateway.host:
            yield
            return
        local = runner.gateway
        async with Gateway(host=host) as public:
            runner.gateway = public
            try:
                yield
            finally:
                runner.gateway = local

    async def run_workflow(
        self, runner: RolloutRunner, workflow_task: WorkflowTask, tuner: ModelTuner
    ) -> WorkflowOutput:
        """The workflow's output, computed in a Ray worker against this rollout's gateway route."""
        import ray

        self._check(runner)
        self._connect()
        job = {
            "task": workflow_task.task.model_dump_json(),
            "group_id": workflow_task.group_id,
            "rollout_id": workflow_task.rollout_id,
            "repeat_index": workflow_task.repeat_index,
            "sampling": asdict(tuner.sampling),
            "auxiliary_sampling": {name: asdict(h.sampling) for name, h in tuner.auxiliary_models.items()},
            "gateway_url": tuner.gateway_url,
            "trainable_targets": list(tuner.trainable_targets),
        }
        ref = self._remote.remote(self.key, self._source_ref, self._config_of(workflow_task), job)
        try:
            output, error = await ref
        except asyncio.CancelledError:
            ray.cancel(ref, force=True)  # the rollout timed out or was cancelled: stop its worker too
            raise
        if error is not None:
            raise RemoteWorkflowError(f"The workflow raised in a Ray worker:\n{error}")
        return output
