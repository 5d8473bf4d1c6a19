"""Algorithms chosen in config: a third party's advantage estimator and policy loss in a real
`astuner run --backbone torch`, and a step of each built-in sequence- and weight-level loss.

The plugin package is built with pip into a folder of its own (`--target`) that the run finds on
PYTHONPATH, so the shared environment never holds it. Its estimator and loss append a line to a
file for every call: the run must have used both, and trained on what they computed.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from astuner_backbone_torch.batching import make_micro_batches  # noqa: E402
from astuner_backbone_torch.policy import Policy  # noqa: E402
from astuner_backbone_torch.settings import TorchSettings  # noqa: E402
from astuner_backbone_torch.trainer import PolicyTrainer, UpdateSettings  # noqa: E402

from astuner.config import load_config  # noqa: E402
from astuner.core.trajectory import Sample  # noqa: E402
from astuner.testing.cli import run_astuner  # noqa: E402
from astuner.testing.packages import plugin_package  # noqa: E402
from astuner.training import AgentPlan, Plugins, policy_loss  # noqa: E402

HERE = Path(__file__).resolve().parent

ALGORITHMS = '''
"""Algorithms `plus_one` (estimator) and `scaled_reinforce` (policy loss), each noting its calls."""

import os

import numpy as np
from pydantic import BaseModel

from astuner.api import Register, hookimpl


def _note(line):
    with open(os.environ["MARKED_CALLS"], "a", encoding="utf-8") as out:
        out.write(line + "\\n")


def plus_one(scores, group, eps):
    """Advantage = score + 1: never 0, so every sample carries a gradient."""
    _note(f"estimator {len(scores)}")
    return np.full_like(scores, -1.0), np.ones_like(scores)


class ScaleSettings(BaseModel):
    scale: float = 1.0


def scaled_reinforce(logprobs, old_logprobs, advantages, mask, settings):
    """REINFORCE times `policy_loss_args.scale`: -scale * A * log p per token, nothing clipped."""
    _note(f"loss {tuple(logprobs.shape)} scale={settings.options.scale} clip={settings.clip_high}")
    return -settings.options.scale * advantages * logprobs, (logprobs * 0.0).detach()


@hookimpl
def register_advantage_estimators(register: Register) -> None:
    register("plus_one", lambda: plus_one, summary="Score plus one.")


@hookimpl
def register_policy_losses(register: Register) -> None:
    register(
        "scaled_reinforce",
        lambda: scaled_reinforce,
        settings=ScaleSettings,
        defaults={"clip_ratio_high": 0.5},
        summary="REINFORCE, scaled.",
    )
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin package, built and installed into a folder of its own."""
    root = tmp_path_factory.mktemp("algorithm_plugin")
    package = plugin_package(root, "marked-algorithms", "marked_algorithms", ALGORITHMS)
    target = root / "site"
    subprocess.run(
        [
            sys.executable, "-m", "pip", "-q", "install", "--no-deps", "--no-build-isolation",
            "--target", str(target), str(package),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return target


def conf(folder: Path, tiny_model_dir: Path) -> Path:
    block = {
        "experiment_name": "plugin_algorithms",
        "model": {"path": str(tiny_model_dir)},
        "task_reader": {"type": "arith", "arith": {"train_size": 4, "validation_size": 2}},
        "data": {"train_batch_size": 2},
        "rollout": {
            "agentscope_workflow": "tiny_workflows->TwoTurn",
            "num_repeat": 2,
            "max_response_length_in_one_turn": 6,
        },
        "trainer_common": {
            "total_training_steps": 1,
            "save_freq": 10,
            "test_freq": 10,
            "algorithm": {
                "adv_estimator": "plus_one",
                "policy_loss": "scaled_reinforce",
                "policy_loss_args": {"scale": 0.5},
            },
        },
        "torch": {"train_dtype": "float32", "gen_dtype": "float32", "num_threads": 1},
    }
    path = folder / "conf.yaml"
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_run_trains_with_a_plugins_estimator_and_policy_loss(
    site: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    calls = tmp_path / "calls.txt"
    result = run_astuner(
        "run",
        "--conf",
        str(conf(tmp_path, tiny_model_dir)),
        "--backbone",
        "torch",
        cwd=tmp_path,
        env={"PYTHONPATH": f"{site}:{HERE}", "MARKED_CALLS": str(calls)},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    lines = calls.read_text(encoding="utf-8").splitlines()
    # One step of 2 tasks x 2 runs: the estimator saw the 4 trajectories' scores.
    assert [line for line in lines if line.startswith("estimator")] == ["estimator 4"]
    losses = [line for line in lines if line.startswith("loss")]
    assert losses, lines
    # policy_loss_args reached the loss as settings.options; its declared default clip as clip_high.
    assert all(line.endswith("scale=0.5 clip=0.5") for line in losses), losses
    (run,) = (tmp_path / "launcher_record" / "plugin_algorithms").iterdir()
    (record,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert record["step"] == 1
    # Advantages of score + 1 are never 0: every sample trained, none skipped.
    assert record["actor/skipped_samples"] == 0 and record["actor/grad_norm"] > 0
    assert record["actor/clip_frac"] == 0.0
    numbers = {k: v for k, v in record.items() if isinstance(v, float)}
    assert all(math.isfinite(v) for v in numbers.values()), numbers


def samples_with_old_logprobs(trainer: PolicyTrainer) -> list[Sample]:
    """Four replies with advantages +-1, their old log-probs slightly off the policy's (so ratios move)."""
    torch.manual_seed(5)
    out = []
    for advantage in (1.0, -1.0, 0.5, -0.5):
        prompt, reply = torch.randint(10, 400, (5,)).tolist(), torch.randint(10, 400, (4,)).tolist()
        sample = Sample(
            input_ids=prompt + reply,
            loss_mask=[0] * 5 + [1] * 4,
            advantages=[0.0] * 5 + [advantage] * 4,
        )
        (batch,) = make_micro_batches([sample], 10_000, trainer.pad_id)
        with torch.no_grad():
            logprobs = trainer.logprobs(trainer.policy.model, batch)[0][0]
        shifted = logprobs + 0.3 * torch.randn_like(logprobs)
        out.append(sample.model_copy(update={"old_logprobs": [0.0, *shifted.tolist()]}))
    return out


@pytest.mark.parametrize("loss", ["gspo", "cispo"])
def test_one_step_with_a_built_in_loss(tiny_model_dir: Path, loss: str) -> None:
    overrides = [f"model.path={tiny_model_dir}", f"trainer_common.algorithm.policy_loss={loss}"]
    config = load_config(None, overrides, environ={})
    chosen = policy_loss(Plugins(load_entry_points=False), config.trainer_common)
    assert chosen.name == loss
    torch.manual_seed(0)
    settings = TorchSettings(train_dtype="float32", gen_dtype="float32")
    policy = Policy.load(config.model, settings, plan=AgentPlan(), need_reference=False)
    trainer = PolicyTrainer(policy, UpdateSettings(lr=1e-3, policy_loss=chosen))
    before = [p.detach().clone() for p in policy.model.parameters()]
    metrics = trainer.update(samples_with_old_logprobs(trainer))
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert metrics["grad_norm"] > 0 and metrics["skipped_updates"] == 0
    # Old log-probs 0.3 off: GSPO's 4e-4 range clips whole sequences, CISPO caps some weights.
    assert 0.0 < metrics["clip_frac"] <= 1.0
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters(), strict=True))
