"""`astuner run --backbone torch -o rollout.executor=ray`: a training step whose rollouts run on Ray.

Needs astuner-executor-ray (executor `ray`). A local Ray head (private temp
dir, token auth off, stopped by process id) is started here; `astuner run`
finds it through RAY_ADDRESS. The workflow file sits next to the config and
is imported by string in the workers; it reports its process id, so the
test can tell the rollouts left the trainer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("ray")
pytest.importorskip("astuner_executor_ray", reason="rollout.executor: ray is plugin astuner-executor-ray")

from astuner.ray_cluster import RayHead
from astuner.record import read_trajectories

WORKFLOW = """
import os
from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask


class AskTwice(Workflow):
    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        messages = [{"role": "user", "content": workflow_task.task.main_query}]
        first = await model_tuner.chat(messages)
        messages += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "Sure?"}]
        second = await model_tuner.chat(messages)
        ids = first.response_ids + second.response_ids
        return WorkflowOutput(
            reward=sum(1 for i in ids if i % 2 == 0) / max(len(ids), 1), metadata={"pid": os.getpid()}
        )
"""


def _config(folder: Path, tiny_model_dir: Path, **trainer: object) -> Path:
    (folder / "ray_workflow.py").write_text(WORKFLOW, encoding="utf-8")
    block = {
        "experiment_name": "ray_async" if trainer else "ray_step",
        "model": {"path": str(tiny_model_dir)},
        "task_reader": {"type": "arith", "arith": {"train_size": 4, "validation_size": 2}},
        "data": {"train_batch_size": 2},
        "rollout": {
            "agentscope_workflow": "ray_workflow->AskTwice",
            "num_repeat": 2,
            "temperature": 1.0,
            "max_response_length_in_one_turn": 8,
            "compute_madness_checklist": [],
        },
        "trainer_common": {
            "total_training_steps": 1,
            "save_freq": 1,
            "test_freq": 2,
            "optim": {"lr": 1e-3},
            **trainer,
        },
        "torch": {"train_dtype": "float32", "gen_dtype": "float32", "num_threads": 1},
    }
    path = folder / f"{block['experiment_name']}.yaml"
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A local Ray head for this module's runs (its process stopped by PID at the end)."""
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    assert ray_bin is not None, "ray is in requirements-dev.txt"
    # CPUs as Ray counts them (a logical resource): enough that both batches under way of an
    # asynchronous run get their workers at once, whatever the machine has.
    with RayHead(ray_bin, num_cpus=8) as head:
        yield head.address


def run_on_ray(conf: Path, address: str, **env: str) -> subprocess.Popen:
    """`astuner run --backbone torch -o rollout.executor=ray` of `conf` against the cluster at `address`,
    finished (its output shown if it failed)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    environment.update(RAY_ADDRESS=address, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", **env)
    command = [sys.executable, "-m", "astuner", "run", "--conf", str(conf), "--backbone", "torch"]
    process = subprocess.Popen(
        [*command, "-o", "rollout.executor=ray"],
        cwd=conf.parent,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=300)
    finally:
        process.kill()  # a run still going after the timeout: no leftover process (a no-op once ended)
    assert process.returncode == 0, output
    return process


@pytest.mark.slow
def test_a_torch_training_step_with_rollouts_on_a_local_ray_cluster(
    tmp_path: Path, tiny_model_dir: Path, ray_address: str
) -> None:
    process = run_on_ray(_config(tmp_path, tiny_model_dir), ray_address)
    (run,) = sorted((tmp_path / "launcher_record" / "ray_step").iterdir())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("step") == 1 for m in metrics), metrics
    trajectories = read_trajectories(run / "rollouts" / "step_1.jsonl")
    assert len(trajectories) == 2 * 2  # train_batch_size tasks x num_repeat runs
    for trajectory in trajectories:
        assert trajectory.error is None, trajectory.error
        assert trajectory.metadata["workflow_output"]["metadata"]["pid"] != process.pid  # ran in a Ray worker
        assert len(trajectory.calls) == 2 and all(
            c.response_ids and c.response_logprobs for c in trajectory.calls
        )
        assert isinstance(trajectory.reward, float)


@pytest.mark.slow
def test_asynchronous_steps_on_a_ray_cluster_share_one_public_gateway(
    tmp_path: Path, tiny_model_dir: Path, ray_address: str
) -> None:
    """max_staleness 1: each step's batch overlaps the next one's, in Ray workers that reach the trainer
    through the gateway ASTUNER_GATEWAY_HOST names (127.0.0.2, another loopback address), held for the
    whole run (RolloutRunner.session; kernel/tests/rollout/test_executors.py checks that overlapping
    runs share it). Every call of step s is sampled by the weights of update s-1 or s-2."""
    conf = _config(
        tmp_path,
        tiny_model_dir,
        total_training_steps=3,
        save_freq=3,
        max_staleness=1,
        algorithm={"rollout_correction": {"rollout_is": "token"}},
    )
    process = run_on_ray(conf, ray_address, ASTUNER_GATEWAY_HOST="127.0.0.2")
    (run,) = sorted((tmp_path / "launcher_record" / "ray_async").iterdir())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "async/staleness_max" in m]
    assert [m["step"] for m in steps] == [1, 2, 3]
    assert all(m["async/staleness_max"] <= 1 for m in steps)
    assert steps[1]["async/calls_stale_1"] > 0  # step 2's batch began before the first update
    for step in (1, 2, 3):
        trajectories = read_trajectories(run / "rollouts" / f"step_{step}.jsonl")
        assert len(trajectories) == 2 * 2
        for trajectory in trajectories:
            assert trajectory.error is None, trajectory.error
            assert trajectory.metadata["workflow_output"]["metadata"]["pid"] != process.pid
            assert {c.policy_version for c in trajectory.calls} <= {step - 2, step - 1}
