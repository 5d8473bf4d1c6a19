"""Backbone `torch` rolling out on a real vLLM server (`rollout.engine: vllm`), weights synced each step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm")
import yaml
from servers import EAGER, SMOLLM2

torch = pytest.importorskip("torch")

import astuner_backbone_torch.plugin as torch_plugin  # noqa: E402
import astuner_engine_vllm.engine as vllm_plugin  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from astuner.cli import make_app  # noqa: E402
from astuner.record import read_trajectories  # noqa: E402
from astuner.run_status import read_status  # noqa: E402

HERE = Path(__file__).resolve().parent
STEPS = 2  # step 2 samples from the weights step 1 synced: enough to see a stale server


def write_conf(folder: Path, name: str, model_path: str, workflow: str = "AnswerOnce", **extra: dict) -> Path:
    block = {
        "experiment_name": name,
        "model": {"path": model_path},
        "task_reader": {"type": "arith", "arith": {"train_size": 8, "validation_size": 2}},
        "data": {"train_batch_size": 2},
        "rollout": {
            "engine": "vllm",
            "agentscope_workflow": f"vllm_workflows->{workflow}",
            "num_repeat": 2,
            "temperature": 1.0,
            "max_response_length_in_one_turn": 24,
            "max_model_len": 1024,
            "engines": {"vllm": {"dtype": "float32"}},
        },
        "trainer_common": {
            "total_training_steps": STEPS,
            "save_freq": 10,
            "test_freq": 10,
            "optim": {"lr": 1e-4},
            "seed": 7,
        },
        "torch": {"train_dtype": "float32", "num_threads": 1},
    }
    for key, value in extra.items():
        block[key] = {**block.get(key, {}), **value}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return path


def train(plugins, workdir: Path, conf: Path, server_env: dict, monkeypatch) -> tuple[int, str, Path]:
    plugins.add(torch_plugin, name="backbone_torch")
    plugins.add(vllm_plugin, name="engine_vllm")
    monkeypatch.syspath_prepend(str(HERE))
    for name, value in server_env.items():  # the server astuner starts inherits them
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(make_app(plugins), ["run", "--conf", str(conf), "--backbone", "torch"])
    (run,) = sorted((workdir / "launcher_record" / conf.stem).iterdir())
    return result.exit_code, result.output, run


def check_versions_and_sync(run: Path) -> list[dict]:
    """Every step's calls were sampled by the weights of the update before it; the sync was timed."""
    for step in range(1, STEPS + 1):
        calls = [c for t in read_trajectories(run / "rollouts" / f"step_{step}.jsonl") for c in t.calls]
        assert calls and {c.policy_version for c in calls} == {step - 1}, step
        assert all(c.response_logprobs and len(c.response_logprobs) == len(c.response_ids) for c in calls)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for record in records:
        assert record["timing/sync_s"] > 0
        # float32 server and trainer on the same weights: a stale or half-synced server shows here
        assert record["actor/rollout_logprob_gap"] < 1e-3
    for r in records:
        print(f"step {r['step']}: sync {r['timing/sync_s']:.2f} s, gap {r['actor/rollout_logprob_gap']:.2g}")
    return records


@pytest.mark.timeout(900)
def test_lora_adapters_are_loaded_into_the_server_after_every_step(
    plugins, workdir: Path, server_env, monkeypatch
) -> None:
    lora = {"lora": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}}
    eager = {"engines": {"vllm": {"dtype": "float32", "serve_args": EAGER}}}
    conf = write_conf(workdir, "vllm_lora", SMOLLM2, model=lora, rollout=eager)
    code, output, run = train(plugins, workdir, conf, server_env, monkeypatch)
    assert code == 0, output
    check_versions_and_sync(run)
    log = (run / "vllm.log").read_text()
    for version in range(1, STEPS + 1):
        assert f"policy-v{version}" in log  # each adapter was loaded under its own name
    assert not (run / "vllm_weights").exists()  # the synced adapters are cleaned up


@pytest.mark.timeout(900)
def test_full_weights_are_reloaded_by_the_server_after_every_step(
    plugins, workdir: Path, server_env, monkeypatch
) -> None:
    conf = write_conf(workdir, "vllm_full", SMOLLM2)
    code, output, run = train(plugins, workdir, conf, server_env, monkeypatch)
    assert code == 0, output
    check_versions_and_sync(run)


@pytest.mark.timeout(600)
def test_a_server_killed_mid_run_stops_the_run_with_its_log(
    plugins, workdir: Path, server_env, monkeypatch, vllm_tiny_model_dir: Path
) -> None:
    conf = write_conf(
        workdir, "vllm_killed", str(vllm_tiny_model_dir), workflow="KillsTheServerAtStep2",
        trainer_common={"save_freq": 1},
        rollout={"engines": {"vllm": {"dtype": "float32", "serve_args": EAGER}}},
    )  # fmt: skip
    code, output, run = train(plugins, workdir, conf, server_env, monkeypatch)
    assert code != 0
    assert "exited with code -9" in output and "Last lines of its log" in output
    status = read_status(run)
    assert status.state == "failed" and "exited with code -9" in (status.reason or "")
    # step 1 was complete and saved; step 2's rollouts that could not reach the server are recorded as failed
    assert (run / "checkpoints" / "step_1").is_dir()
    step_2 = read_trajectories(run / "rollouts" / "step_2.jsonl")
    assert step_2 and all(t.error and "exited with code -9" in t.error for t in step_2)
