"""`astuner run --backbone torch` with per-agent adapters: routed rollouts, per-agent updates, resume; then
backbone debug on a saved adapter."""

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

import astuner_backbone_torch.plugin as torch_plugin  # noqa: E402
from test_backbone_run import HERE, run_folders, write_conf  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from astuner.cli import make_app  # noqa: E402
from astuner.record import read_trajectories  # noqa: E402

AGENTS = {"wolf": {"lora": {"rank": 4}}, "seer": {"lora": {"rank": 4}}}


@pytest.fixture
def app(plugins, monkeypatch: pytest.MonkeyPatch):
    """The CLI with backbone torch, and the tiny workflows importable."""
    plugins.add(torch_plugin, name="backbone_torch")
    monkeypatch.syspath_prepend(str(HERE))
    return make_app(plugins)


@pytest.mark.slow
def test_a_run_trains_each_agents_adapter_and_resumes_them(app, workdir: Path, tiny_model_dir: Path) -> None:
    conf = write_conf(
        workdir,
        tiny_model_dir,
        "agents",
        agents=AGENTS,
        rollout={"agentscope_workflow": "tiny_workflows->TwoAgents", "num_repeat": 2},
    )
    once = ["-o", "trainer_common.total_training_steps=1", "-o", "trainer_common.test_freq=10"]
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "torch", *once])
    assert result.exit_code == 0, result.output

    (run,) = run_folders(workdir, "agents")
    (metrics,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for agent in ("wolf", "seer"):
        assert metrics[f"actor/{agent}/tokens_trained"] > 0
    assert metrics["actor/samples_without_adapter"] == 0  # the villager's calls never became samples
    assert 0.0 <= metrics["train/zero_adv_group_frac"] <= 1.0  # a share of the task-and-agent groups
    calls = [c for t in read_trajectories(run / "rollouts" / "step_1.jsonl") for c in t.calls]
    assert {(c.agent_name, c.sampling.adapter, c.trainable) for c in calls} == {
        ("wolf", "wolf", True),
        ("seer", "seer", True),
        ("villager", None, False),
    }
    checkpoint = run / "checkpoints" / "step_1"
    for agent in ("wolf", "seer"):
        assert (checkpoint / "adapters" / agent / "adapter_model.safetensors").is_file()
    assert json.loads((checkpoint / "trainer_state.json").read_text())["adapters"] == ["seer", "wolf"]

    resume = ["-o", "trainer_common.resume=auto", "-o", "trainer_common.test_freq=10"]
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "torch", *resume])
    assert result.exit_code == 0, result.output
    resumed = next(p for p in run_folders(workdir, "agents") if p != run)
    assert (resumed / "checkpoints" / "step_2" / "adapters" / "wolf").is_dir()

    # The seer now trains no adapter: the checkpoint does not fit this run.
    fixed = ["-o", f"agents.seer.lora.path={checkpoint / 'adapters' / 'seer'}"]
    other = [*resume, *fixed, "-o", "rollout.trainable_targets=[wolf]"]
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "torch", *other])
    assert result.exit_code != 0
    assert "holds adapters of ['seer'], which this run does not train" in result.output

    # The workflow's own trainable_targets pick the adapters that train; the seer's fixed one generates.
    workflow = ["-o", "rollout.agentscope_workflow=tiny_workflows->WolfTrains"]
    result = CliRunner().invoke(
        app, ["run", "--conf", str(conf), "--backbone", "torch", *once, *fixed, *workflow]
    )
    assert result.exit_code == 0, result.output
    latest = max(run_folders(workdir, "agents"))
    (metrics,) = [json.loads(line) for line in (latest / "metrics.jsonl").read_text().splitlines()]
    assert "actor/wolf/tokens_trained" in metrics and not any(k.startswith("actor/seer/") for k in metrics)
    calls = [c for t in read_trajectories(latest / "rollouts" / "step_1.jsonl") for c in t.calls]
    assert {(c.agent_name, c.sampling.adapter, c.trainable) for c in calls} == {
        ("wolf", "wolf", True),
        ("seer", "seer", False),
        ("villager", None, False),
    }

    # Backbone debug (no training loop): engine transformers loads the seer's saved adapter, frozen; the
    # wolf's new adapter changes nothing, so it runs on the base model, with no warning.
    debug = [*fixed, "-o", "debug.debug_first_n_tasks=1"]
    result = CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "debug", *debug])
    assert result.exit_code == 0, result.output
    latest = max(run_folders(workdir, "agents"))
    assert "agents without their adapters" not in (latest / "astuner.log").read_text()
    calls = [c for t in read_trajectories(latest / "rollouts" / "debug.jsonl") for c in t.calls]
    assert {(c.agent_name, c.sampling.adapter) for c in calls} == {
        ("wolf", None),
        ("seer", "seer"),
        ("villager", None),
    }
