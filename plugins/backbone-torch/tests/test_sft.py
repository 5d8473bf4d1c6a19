"""`astuner sft` on the tiny model: loss on trained tokens only; demonstrations, judged records, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

import astuner_backbone_torch.plugin as torch_plugin  # noqa: E402
from astuner_backbone_torch.batching import make_micro_batches  # noqa: E402
from astuner_backbone_torch.policy import Policy  # noqa: E402
from astuner_backbone_torch.settings import TorchSettings  # noqa: E402
from astuner_backbone_torch.trainer import PolicyTrainer, UpdateSettings  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from astuner.cli import make_app  # noqa: E402
from astuner.config import load_config  # noqa: E402
from astuner.core.demonstrations import demonstration_trajectory  # noqa: E402
from astuner.core.tokenizer import load_tokenizer  # noqa: E402
from astuner.core.tracker import TrackerSettings  # noqa: E402
from astuner.record import append_trajectories, read_trajectories  # noqa: E402
from astuner.run_status import read_status  # noqa: E402
from astuner.testing.broken_tool_calls import MULTIPLY_TOOL  # noqa: E402
from astuner.training import AgentPlan  # noqa: E402

TOOLS = [MULTIPLY_TOOL]


def demonstration(a: int, b: int) -> dict:
    call = {
        "id": "c0",
        "type": "function",
        "function": {"name": "multiply", "arguments": json.dumps({"a": a, "b": b})},
    }
    return {
        "messages": [
            {"role": "system", "content": "Multiply with the tool."},
            {"role": "user", "content": f"What is {a} times {b}?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c0", "name": "multiply", "content": str(a * b)},
            {"role": "assistant", "content": f"{a} times {b} is {a * b}."},
        ],
        "tools": TOOLS,
    }


@pytest.fixture
def demos(workdir: Path) -> Path:
    path = workdir / "demos.jsonl"
    path.write_text("".join(json.dumps(demonstration(100 + i, 10 + i)) + "\n" for i in range(4)))
    return path


@pytest.fixture
def conf(workdir: Path, tiny_model_dir: Path) -> Path:
    block = {
        "experiment_name": "warm",
        "model": {"path": str(tiny_model_dir)},
        "trainer_common": {"seed": 3},
        "torch": {
            "train_dtype": "float32",
            "gen_dtype": "float32",
            "num_threads": 1,
            "sft": {"epochs": 3, "lr": 3e-3, "batch_size": 2},
        },
    }
    path = workdir / "warm.yaml"
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return path


@pytest.fixture
def app(plugins):
    plugins.add(torch_plugin, name="backbone_torch")
    return make_app(plugins)


def sft(app, *args: str) -> str:
    result = CliRunner().invoke(app, ["sft", *args])
    assert result.exit_code == 0, result.output
    return result.output


def runs(workdir: Path) -> list[Path]:
    return sorted((workdir / "launcher_record" / "warm-sft").iterdir())


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_likelihood_loss_is_the_mean_nll_of_trained_tokens_only(tiny_model_dir: Path) -> None:
    from astuner_backbone_torch.losses import step_norm

    from astuner.core.trajectory import Sample

    config = load_config(None, [f"model.path={tiny_model_dir}"], environ={})
    fp32 = TorchSettings(train_dtype="float32", gen_dtype="float32")
    policy = Policy.load(config.model, fp32, plan=AgentPlan(), need_reference=False)
    trainer = PolicyTrainer(policy, UpdateSettings())
    torch.manual_seed(1)
    ids = torch.randint(10, 400, (12,)).tolist()
    mask = [0] * 5 + [1] * 3 + [0] * 2 + [1] * 2  # prompt, a turn, a tool result, a turn
    sample = Sample(input_ids=ids, loss_mask=mask, advantages=[0.0] * 12)
    (batch,) = make_micro_batches([sample], 10_000, trainer.pad_id)
    with torch.no_grad():
        loss, _ = trainer.likelihood_loss(batch, step_norm([batch.mask]))
        logits = trainer.policy.model(torch.tensor([ids])).logits[0, :-1]
    nll = -torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    trained = torch.tensor(mask[1:], dtype=torch.bool)
    assert float(loss) == pytest.approx(float(nll[trained].mean()), rel=1e-5)
    assert float(loss) != pytest.approx(
        float(nll.mean()), rel=1e-3
    )  # the untrained positions would change it


def test_sft_on_demonstrations_lowers_their_nll_and_records_what_it_trained(app, workdir, conf, demos):
    output = sft(app, "--conf", str(conf), "--from", str(demos))
    (run,) = runs(workdir)
    rows = metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 7))  # 3 epochs x 4 samples / 2 per step
    assert rows[-1]["sft/nll"] < rows[0]["sft/nll"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_2", "step_4", "step_6"]
    assert f"checkpoint:  {(run / 'checkpoints' / 'step_6').resolve()}" in output
    assert "Not used on backbone" not in output
    # a run of the command sft, closed as `astuner run` closes its runs, plus the step to RL
    assert (read_status(run).state, read_status(run).command) == ("finished", "sft")
    lines = output.strip().splitlines()
    (first,) = [i for i, line in enumerate(lines) if line.startswith("sft finished after ")]
    step_6 = (run / "checkpoints" / "step_6").resolve()
    assert lines[first].endswith(f"6 steps: {run.resolve()}")
    assert lines[first + 1 : first + 3] == [
        f"  records:     {run.resolve()}/rollouts/",
        f"  checkpoint:  {step_6}",
    ]
    evaluate = f"  evaluate:    astuner eval --conf {run.resolve()}/config.yaml --checkpoint {step_6}"
    assert evaluate + "  (needs astuner-eval)" in lines  # no eval plugin in this app
    assert lines[-1] == f"  RL from it:  astuner run --conf {conf} --backbone torch -o model.path={step_6}"
    trained = read_trajectories(run / "rollouts" / "sft_data.jsonl")
    assert len(trained) == 4 and all(len(t.calls) == 2 for t in trained)
    assert (run / "checkpoints" / "step_6" / "config.json").is_file()  # loadable as model.path


def test_sft_on_records_keeps_only_what_the_judge_passed(app, workdir, conf, demos, tiny_model_dir):
    sft(app, "--conf", str(conf), "--from", str(demos), "--epochs", "1")
    (first,) = runs(workdir)
    recorded = read_trajectories(first / "rollouts" / "sft_data.jsonl")
    for trajectory, success in zip(recorded, [True, False, True, False], strict=True):
        trajectory.reward, trajectory.is_success = (1.0 if success else 0.0), success
    recorded[2].error = "Traceback: the workflow failed"  # a failed rollout is never trained on
    step_file = workdir / "records" / "rollouts" / "step_1.jsonl"
    append_trajectories(step_file, recorded)

    sft(app, "--conf", str(conf), "--from", str(workdir / "records"))
    second = runs(workdir)[-1]
    kept = read_trajectories(second / "rollouts" / "sft_data.jsonl")
    assert [t.trajectory_id for t in kept] == [recorded[0].trajectory_id]
    assert "1 of 4 trajectories" in (second / "astuner.log").read_text()

    sft(app, "--conf", str(conf), "--from", str(step_file), "--min-reward", "0")
    assert len(read_trajectories(runs(workdir)[-1] / "rollouts" / "sft_data.jsonl")) == 3


def test_nothing_left_to_train_on_is_a_clear_error(app, workdir, conf, demos):
    records = workdir / "step_1.jsonl"
    tokenizer = load_tokenizer(yaml.safe_load(conf.read_text())["astuner"]["model"]["path"])
    failed = demonstration_trajectory(tokenizer, TrackerSettings(), demonstration(3, 4)["messages"], TOOLS)
    failed.reward, failed.is_success = 0.0, False
    append_trajectories(records, [failed])
    result = CliRunner().invoke(app, ["sft", "--conf", str(conf), "--from", str(records)])
    assert result.exit_code == 1
    assert (
        "nothing to fine-tune on" in result.output
        and "1 trajectories read, 0 counted a success" in result.output
    )
    assert "Traceback" not in result.output


def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(app, workdir, conf, demos):
    sft(app, "--conf", str(conf), "--from", str(demos))
    straight = load_file(runs(workdir)[-1] / "checkpoints" / "step_6" / "model.safetensors")
    # The same run cut after epoch 1 (its last complete checkpoint: step 2), then resumed.
    sft(app, "--conf", str(conf), "--from", str(demos), "-o", "experiment_name=cut", "--epochs", "1")
    cut = sorted((workdir / "launcher_record" / "cut-sft").iterdir())[-1]
    assert sorted(p.name for p in (cut / "checkpoints").iterdir()) == ["step_2"]
    sft(
        app,
        "--conf",
        str(conf),
        "--from",
        str(demos),
        "-o",
        "experiment_name=cut",
        "-o",
        "trainer_common.resume=auto",
    )
    resumed = sorted((workdir / "launcher_record" / "cut-sft").iterdir())[-1]
    assert [r["step"] for r in metrics(resumed)] == [3, 4, 5, 6]
    weights = load_file(resumed / "checkpoints" / "step_6" / "model.safetensors")
    assert weights.keys() == straight.keys()
    assert all(torch.equal(weights[k], straight[k]) for k in weights)
