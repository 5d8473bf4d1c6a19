"""`astuner run --backbone torch` on the tiny model: records, kill-and-resume, LoRA."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

import astuner_backbone_torch.plugin as torch_plugin  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from astuner.cli import make_app  # noqa: E402
from astuner.record import read_trajectories  # noqa: E402
from astuner.testing.counting import count_builds  # noqa: E402

HERE = Path(__file__).resolve().parent
STEPS = 2


def write_conf(folder: Path, tiny_model_dir: Path, name: str, **extra: dict) -> Path:
    block = {
        "experiment_name": name,
        "model": {"path": str(tiny_model_dir)},
        "task_reader": {"type": "arith", "arith": {"train_size": 6, "validation_size": 2}},
        "data": {"train_batch_size": 2},
        "rollout": {
            "agentscope_workflow": "tiny_workflows->TwoTurn",
            "num_repeat": 3,
            "temperature": 1.0,
            "max_response_length_in_one_turn": 8,
            # Every request of a turn lands in one batch, and no request joins a running one (that
            # depends on timing): same batches, same samples, in every run.
            "engines": {
                "transformers": {"batch_wait_ms": 200, "continuous_batching": False, "num_threads": 1}
            },
        },
        "trainer_common": {
            "total_training_steps": STEPS,
            "save_freq": 1,
            "test_freq": 2,
            "optim": {"lr": 1e-3},
            "seed": 7,
        },
        "torch": {"train_dtype": "float32", "gen_dtype": "float32", "num_threads": 1},
    }
    for key, value in extra.items():
        block[key] = {**block.get(key, {}), **value}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return path


def astuner_run(conf: Path, *overrides: str, env: dict | None = None) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    environment["PYTHONPATH"] = os.pathsep.join([str(HERE), environment.get("PYTHONPATH", "")])
    environment.update(env or {})
    command = [sys.executable, "-m", "astuner", "run", "--conf", str(conf), "--backbone", "torch"]
    for override in overrides:
        command += ["-o", override]
    return subprocess.Popen(
        command, cwd=conf.parent, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(process: subprocess.Popen) -> str:
    try:
        output, _ = process.communicate(timeout=240)
    finally:
        process.kill()  # a run still going after the timeout: no leftover process (a no-op once ended)
    assert process.returncode == 0, output
    return output


def run_folders(root: Path, name: str) -> list[Path]:
    return sorted((root / "launcher_record" / name).iterdir())


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "model.safetensors")


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, tiny_model_dir: Path) -> Path:
    """One uninterrupted 3-step run; its experiment folder."""
    folder = tmp_path_factory.mktemp("base")
    finish(astuner_run(write_conf(folder, tiny_model_dir, "straight")))
    (run,) = run_folders(folder, "straight")
    return run


# The last commit before asynchronous rollouts (trainer_common.max_staleness): its synchronous loop is
# what max_staleness 0, the default, must still reproduce.
BEFORE_ASYNC = "44ca50b779f65f781233183b2258998542e90524"
REPO = HERE.parents[2]


def code_of(commit: str, folder: Path) -> str | None:
    """The kernel's and plugins' source folders of `commit`, unpacked into `folder`, as a PYTHONPATH;
    None where this checkout has no such commit (a shallow clone, an unpacked release)."""
    if not (REPO / ".git").exists():
        return None
    known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"], check=False)
    if known.returncode != 0:
        return None
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    sources = [folder / "kernel" / "src", *sorted(folder.glob("plugins/*/src"))]
    return os.pathsep.join(str(path) for path in sources)


@pytest.mark.slow
def test_staleness_0_trains_as_the_loop_before_asynchronous_rollouts_bit_for_bit(
    base_run: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The same run on the code of the commit before max_staleness existed: the same metrics (but the
    timings) and the same weights, bit for bit."""
    old_code = code_of(BEFORE_ASYNC, tmp_path)
    if old_code is None:
        pytest.skip(f"this checkout has no commit {BEFORE_ASYNC[:8]} (a shallow clone?)")
    conf = write_conf(tmp_path, tiny_model_dir, "straight")
    finish(astuner_run(conf, env={"PYTHONPATH": os.pathsep.join([old_code, str(HERE)])}))
    (before,) = run_folders(tmp_path, "straight")

    def records(run: Path) -> list[dict]:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in row.items() if not k.startswith(("timing/", "perf/"))} for row in rows]

    assert records(base_run) == records(before)
    for step in range(1, STEPS + 1):
        expected, got = (
            weights(before / "checkpoints" / f"step_{step}"),
            weights(base_run / "checkpoints" / f"step_{step}"),
        )
        assert expected.keys() == got.keys()
        for name in expected:
            assert torch.equal(expected[name], got[name]), (step, name)


@pytest.mark.slow
def test_a_run_leaves_metrics_tensorboard_rollouts_and_loadable_checkpoints(base_run: Path) -> None:
    records = [json.loads(line) for line in (base_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for key in (
        "train/reward_mean",
        "train/success_rate",
        "train/zero_adv_group_frac",
        "train/merge_ratio",
        "actor/kl",
        "actor/clip_frac",
        "actor/grad_norm",
        "actor/entropy",
        "actor/tokens_trained",
        "actor/rollout_logprob_gap",
        "actor/rollout_kl",
        "timing/rollout_s",
        "timing/update_s",
        "timing/sync_s",
    ):
        assert key in records[0], key
    assert records[0]["train/merge_ratio"] > 1  # two calls per episode, merged into one sample
    assert records[0]["actor/rollout_logprob_gap"] < 1e-3  # the engine is the policy itself
    assert "val/reward_mean" in records[1] and "val/pass@1" in records[1]
    assert list((base_run / "tensorboard").glob("events.out.tfevents.*"))
    for step in range(1, STEPS + 1):
        trajectories = read_trajectories(base_run / "rollouts" / f"step_{step}.jsonl")
        assert len(trajectories) == 6
        # sampled by the weights after step - 1 updates
        assert {c.policy_version for t in trajectories for c in t.calls} == {step - 1}
    assert sorted(p.name for p in (base_run / "checkpoints").iterdir()) == ["step_1", "step_2"]
    model = AutoModelForCausalLM.from_pretrained(base_run / "checkpoints" / "step_2")
    trained = weights(base_run / "checkpoints" / "step_2")
    first = weights(base_run / "checkpoints" / "step_1")
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(model.state_dict()[name], trained[name])
    assert not torch.equal(first[name], trained[name])


@pytest.mark.slow
def test_a_nan_reward_is_a_rollout_error_and_never_reaches_the_weights(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    judge = {"judge_protocol": "tiny_workflows->NanForTheFirstRollout"}
    conf = write_conf(tmp_path, tiny_model_dir, "nan", task_judge=judge)
    output = finish(astuner_run(conf))
    assert "non-finite reward" in output  # the console warns
    (run,) = run_folders(tmp_path, "nan")
    for step in range(1, STEPS + 1):
        trajectories = read_trajectories(run / "rollouts" / f"step_{step}.jsonl")
        failed = [t for t in trajectories if t.error]
        assert len(failed) == 1 and failed[0].reward is None, [t.error for t in trajectories]
        assert "returned a non-finite reward (nan)" in failed[0].error
        assert "NanForTheFirstRollout" in failed[0].error
        assert all(t.reward == t.reward for t in trajectories if not t.error)  # the others: finite, trained
    for step in range(1, STEPS + 1):
        for name, tensor in weights(run / "checkpoints" / f"step_{step}").items():
            assert torch.isfinite(tensor).all(), name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["actor/skipped_updates"] == 0 for r in records)  # nothing non-finite got that far


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights_bit_for_bit(
    base_run: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    conf = write_conf(tmp_path, tiny_model_dir, "killed")
    pause = tmp_path / "paused"
    process = astuner_run(conf, env={"BT_PAUSE_GROUP": "step2-", "BT_PAUSE_FILE": str(pause)})
    deadline = time.monotonic() + 240
    while not pause.exists():
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the run never reached step 2"
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)  # mid-step: step 2's rollouts are under way
    process.communicate(timeout=60)
    (killed,) = run_folders(tmp_path, "killed")
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == ["step_1"]

    output = finish(astuner_run(conf, "trainer_common.resume=auto"))
    assert "resumed" in output
    resumed = next(p for p in run_folders(tmp_path, "killed") if p != killed)
    records = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2]
    step_2 = read_trajectories(resumed / "rollouts" / "step_2.jsonl")
    assert {c.policy_version for t in step_2 for c in t.calls} == {1}  # the checkpoint's weights
    expected = weights(base_run / "checkpoints" / "step_2")
    got = weights(resumed / "checkpoints" / "step_2")
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    straight_state = torch.load(base_run / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
    resumed_state = torch.load(resumed / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
    for a, b in zip(
        straight_state["optimizer"]["state"].values(),
        resumed_state["optimizer"]["state"].values(),
        strict=True,
    ):
        assert torch.equal(a["exp_avg"], b["exp_avg"])


@pytest.mark.slow
def test_lora_run_saves_an_adapter_that_reloads_and_resumes(
    plugins, workdir: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from peft import PeftModel

    plugins.add(torch_plugin, name="backbone_torch")
    monkeypatch.syspath_prepend(str(HERE))
    lora = {"lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}
    conf = write_conf(workdir, tiny_model_dir, "lora", model=lora)
    app = make_app(plugins)
    steps = ["-o", "trainer_common.total_training_steps=1", "-o", "trainer_common.test_freq=10"]
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "torch", *steps])
    assert result.exit_code == 0, result.output
    (run,) = run_folders(workdir, "lora")
    checkpoint = run / "checkpoints" / "step_1"
    assert (checkpoint / "adapter_config.json").is_file()
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert not (checkpoint / "model.safetensors").exists()

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        plain = base(ids).logits
        tuned = PeftModel.from_pretrained(base, checkpoint)(ids).logits
    assert not torch.allclose(plain, tuned)  # the adapter learned something and was reloaded

    result = CliRunner().invoke(
        app, ["run", "--conf", str(conf), "--backbone", "torch", "-o", "trainer_common.resume=auto"]
    )
    assert result.exit_code == 0, result.output
    resumed = next(p for p in run_folders(workdir, "lora") if p != run)
    assert sorted(p.name for p in (resumed / "checkpoints").iterdir()) == ["step_2"]
    adapter = load_file(resumed / "checkpoints" / "step_2" / "adapter_model.safetensors")
    assert any("lora_B" in name and adapter[name].abs().sum() > 0 for name in adapter)


@pytest.mark.slow
def test_a_run_builds_its_reader_judge_and_checks_once(
    plugins, workdir: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training and validation rollouts share one stack: one reader, judge and check for the whole run."""
    plugins.add(torch_plugin, name="backbone_torch")
    counts = count_builds(plugins)
    monkeypatch.syspath_prepend(str(HERE))
    conf = write_conf(
        workdir,
        tiny_model_dir,
        "once",
        task_reader={"type": "counted_arith", "counted_arith": {"train_size": 4, "validation_size": 2}},
        task_judge={"judge_protocol": "counted_exact"},
        rollout={"compute_madness_checklist": ["counted_nonsense"]},
    )
    steps = ["-o", "trainer_common.total_training_steps=2", "-o", "trainer_common.test_freq=1"]
    result = CliRunner().invoke(
        make_app(plugins), ["run", "--conf", str(conf), "--backbone", "torch", *steps]
    )
    assert result.exit_code == 0, result.output
    assert counts == {"reader": 1, "judge": 1, "madness_check": 1}
