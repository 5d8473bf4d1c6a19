"""`rollout.executor: ray` with an auxiliary model: the worker's handles call back through the gateway.

The workflow of `astuner.testing.auxiliary.FLOW` runs in a Ray worker and calls the
critic twice (`chat()` and an OpenAI client); the judge calls it once more
in the driver. The driver's untrainable handles serve and record all three.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from astuner.core.merge import merge_trajectory  # noqa: E402
from astuner.plugins import Plugins  # noqa: E402
from astuner.ray_cluster import RayHead  # noqa: E402
from astuner.testing.auxiliary import FLOW, engines_plugin, flow_config, model_folders, run  # noqa: E402

FLOW_WITH_PID = """
import os

from aux_ray_base import judge, workflow as base


async def workflow(task, model, auxiliary_models=None):
    output = await base(task, model, auxiliary_models)
    output.metadata["pid"] = os.getpid()
    return output
"""


@pytest.mark.slow
def test_a_ray_worker_calls_the_auxiliary_model_through_the_gateway(
    ray_head: RayHead,
    ray_plugins: Plugins,
    write_config,
    workdir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folders = model_folders(tmp_path_factory.mktemp("models"))
    built = engines_plugin(ray_plugins, folders)
    (workdir / "aux_ray_base.py").write_text(FLOW, encoding="utf-8")
    config = flow_config(write_config, workdir, folders, module=FLOW_WITH_PID, name="aux_ray")
    config.rollout.executor = "ray"
    trajectories = run(config, ray_plugins, num_repeat=1)
    assert [t.reward for t in trajectories] == [1.0, 0.0]
    (critic,) = built.critic
    assert critic.calls == 6
    for t in trajectories:
        assert t.error is None, t.error
        output = t.metadata["workflow_output"]["metadata"]
        assert output["pid"] != os.getpid()  # the workflow ran in a Ray worker
        assert (output["review"], output["again"]) == ("looks fine", "still fine")
        assert [c.content for c in t.auxiliary_calls][:2] == ["looks fine", "still fine"]
        assert all(c.agent_name == "critic" and not c.trainable for c in t.auxiliary_calls)
        (call,) = t.calls
        assert call.trainable and call.response_logprobs
        (sample,) = merge_trajectory(t)[0]
        assert sample.input_ids == call.prompt_ids + call.response_ids
