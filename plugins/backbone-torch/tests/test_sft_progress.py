"""`astuner sft` off a terminal logs a progress line at a steady interval while its steps run.

A step of a larger model on a CPU takes minutes; its own lines come only when
a step ends. Here the interval is 0.2 s; as each step starts, the test reads
the run's log (what a user tailing a redirected run would see), and each step
lasts until a progress line counting the steps done before it is in the log
(or 30 s: without such lines the test fails, slowly), so the test does not
depend on how fast a loaded machine runs the progress thread.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

import astuner_backbone_torch.plugin as torch_plugin  # noqa: E402
from astuner_backbone_torch.trainer import PolicyTrainer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from astuner.cli import make_app  # noqa: E402

STEPS = 4


def test_sft_logs_its_progress_while_the_steps_run(
    plugins, workdir: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demos = workdir / "demos.jsonl"
    turns = [
        [{"role": "user", "content": f"{i} + 1?"}, {"role": "assistant", "content": str(i + 1)}]
        for i in range(4)
    ]
    demos.write_text("".join(json.dumps({"messages": m}) + "\n" for m in turns), encoding="utf-8")
    block = {
        "experiment_name": "warm",
        "model": {"path": str(tiny_model_dir)},
        "torch": {
            "train_dtype": "float32",
            "gen_dtype": "float32",
            "num_threads": 1,
            "sft": {"epochs": 2, "batch_size": 2},
        },
    }
    (workdir / "warm.yaml").write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    monkeypatch.setenv("ASTUNER_PROGRESS_EVERY_S", "0.2")
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    seen: list[list[dict]] = []  # the progress lines in the log as each step starts
    update = PolicyTrainer.update

    def progress_lines() -> list[dict]:
        (log,) = (workdir / "launcher_record" / "warm-sft").glob("*/astuner.log")
        lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
        return [line for line in lines if line["event"] == "sft progress"]

    def slow_update(self: PolicyTrainer, *args: object, **kwargs: object) -> dict[str, float]:
        seen.append(progress_lines())
        done = update(self, *args, **kwargs)
        counted, deadline = f"{len(seen) - 1}/{STEPS}", time.monotonic() + 30
        while not any(line["step"] == counted for line in progress_lines()) and time.monotonic() < deadline:
            time.sleep(0.05)  # the step lasts until the progress thread has counted the ones before it
        return done

    monkeypatch.setattr(PolicyTrainer, "update", slow_update)
    plugins.add(torch_plugin, name="backbone_torch")
    result = CliRunner().invoke(make_app(plugins), ["sft", "--conf", "warm.yaml", "--from", str(demos)])
    assert result.exit_code == 0, result.output
    assert len(seen) == STEPS
    last = seen[-1]  # three steps before it, each counted while it ran
    for done in range(STEPS - 1):
        assert any(line["step"] == f"{done}/{STEPS}" for line in last), last
    assert last[-1]["tokens_trained"] > 0 and last[-1]["tokens_per_s"] > 0 and last[-1]["elapsed_s"] > 0
