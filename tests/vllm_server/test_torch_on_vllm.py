"""Backbone `torch` rolling out on a real vLLM server (`rollout.engine: vllm`), weights synced each step,
synchronously and with asynchronous rollouts (`trainer_common.max_staleness`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("vllm")
import yaml
from astuner_engine_vllm import VllmEngine
from servers import EAGER, SMOLLM2, start_engine

torch = pytest.importorskip("torch")

import astuner_backbone_torch.plugin as torch_plugin  # noqa: E402
import astuner_engine_vllm.engine as vllm_plugin  # noqa: E402
from astuner_backbone_torch.vllm_rollout import server_flags  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from astuner.cli import make_app  # noqa: E402
from astuner.record import read_trajectories  # noqa: E402
from astuner.run_status import read_status  # noqa: E402

HERE = Path(__file__).resolve().parent
STEPS = 2  # step 2 samples from the weights step 1 synced: enough to see a stale server
LORA = {"lora": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}}
# A batch starts a step early; its second calls wait for the weights their step trains from.
ASYNC = {"max_staleness": 1, "algorithm": {"rollout_correction": {"rollout_is": "token"}}}


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


def check_versions_and_sync(run: Path, bound: int = 0) -> list[dict]:
    """Every step's calls were sampled by the weights of one of the `bound` + 1 updates before it (with
    `bound` > 0 some by older ones than the last); the trainer's log-probs match the server's on the
    fresh calls (those sampled by the weights the update starts from); the sync was timed."""
    stale = 0
    for step in range(1, STEPS + 1):
        calls = [c for t in read_trajectories(run / "rollouts" / f"step_{step}.jsonl") for c in t.calls]
        versions = {c.policy_version for c in calls}
        assert calls and versions <= set(range(max(0, step - 1 - bound), step)) and step - 1 in versions, step
        stale += sum(c.policy_version < step - 1 for c in calls)
        assert all(c.response_logprobs and len(c.response_logprobs) == len(c.response_ids) for c in calls)
    assert (stale > 0) == (bound > 0)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for record in records:
        assert record["timing/sync_s"] > 0
        # float32 server and trainer on the same weights: a stale or half-synced server shows here
        assert record["actor/rollout_logprob_gap"] < 1e-3
        if bound:
            assert record["async/staleness_max"] <= bound
    for r in records:
        print(f"step {r['step']}: sync {r['timing/sync_s']:.2f} s, gap {r['actor/rollout_logprob_gap']:.2g}")
    return records


@pytest.fixture(scope="module")
def lora_server(
    smollm2_dir: str, server_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmEngine]:
    """SmolLM2 in float32 with the runtime-LoRA flags a run with max_staleness 1 starts its server with;
    the LoRA runs attach to it, one after the other (each unloads its adapters when it ends)."""
    args, env = server_flags(True, LORA["lora"]["rank"], max_staleness=1)
    log = tmp_path_factory.mktemp("lora-server") / "vllm.log"
    served = {"dtype": "float32", "serve_args": [*EAGER, *args]}
    engine = start_engine(smollm2_dir, log, {**server_env, **env}, **served)
    yield engine
    asyncio.run(engine.aclose())


@pytest.mark.timeout(900)
@pytest.mark.parametrize("bound", [0, 1], ids=["synchronous", "max_staleness_1"])
def test_lora_adapters_are_loaded_into_the_server_after_every_step(
    plugins, workdir: Path, server_env, monkeypatch, lora_server: VllmEngine, bound: int
) -> None:
    name = f"vllm_lora_{bound}"
    attached = {"model": LORA, "rollout": {"engine_url": lora_server.url}}
    if bound:
        conf = write_conf(workdir, name, SMOLLM2, "AnswerTwiceOnNewWeights", trainer_common=ASYNC, **attached)
    else:
        conf = write_conf(workdir, name, SMOLLM2, **attached)
    log_before = lora_server.server.log_file.read_text()
    code, output, run = train(plugins, workdir, conf, server_env, monkeypatch)
    assert code == 0, output
    check_versions_and_sync(run, bound)
    log = lora_server.server.log_file.read_text().removeprefix(log_before)
    for version in range(1, STEPS + 1):
        assert f"policy-v{version}" in log  # each adapter was loaded under its own name
    served = httpx.get(f"{lora_server.url}/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in served] == [lora_server.served_name]  # every adapter unloaded: none leaks
    assert not (run / "vllm_weights").exists()  # the synced adapters are cleaned up


@pytest.mark.timeout(900)
def test_full_weights_are_reloaded_by_the_server_after_every_step_under_staleness(
    plugins, workdir: Path, server_env, monkeypatch
) -> None:
    """Reloads that wait for the requests in flight (the batch ahead's first calls) and hold new ones
    back: the fresh second calls then match the trainer's weights. The synchronous loop's sync is the
    same reload with nothing in flight (the LoRA runs check that loop on a server)."""
    conf = write_conf(workdir, "vllm_full", SMOLLM2, "AnswerTwiceOnNewWeights", trainer_common=ASYNC)
    code, output, run = train(plugins, workdir, conf, server_env, monkeypatch)
    assert code == 0, output
    check_versions_and_sync(run, 1)


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
