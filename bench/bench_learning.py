"""Does the `torch` backbone learn? SmolLM2-135M-Instruct on `arith`, 30 GRPO steps on CPU.

Runs the real trainer (backbone `torch`, in-process) on the built-in `arith`
task set (easy word problems) with a one-call workflow: 8 tasks x 4
rollouts per step, at most 48 new tokens, reward 1 when the last number of
the reply is the answer (judge `exact`), no KL, learning rate 3e-5.
Validation is greedy on the first 64 validation tasks, before training and
every third of the run (32 tasks left the before/after figure within a few
tasks' noise).
Prints the validation reward before and after and writes the reward curve
as a PNG (needs matplotlib).

    .venv/bin/python bench/bench_learning.py                 # 30 steps, ~15-20 min on 2 cores
    .venv/bin/python bench/bench_learning.py --steps 6 --out /tmp/curve.png

Target: validation reward up by at least 0.2 (absolute) after 30 steps.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from astuner.config import load_config
from astuner.core.task import WorkflowOutput
from astuner.plugins import Plugins
from astuner.protocols import RunContext
from astuner.record import ExperimentDir

HERE = Path(__file__).resolve().parent
_NUMBER = re.compile(r"-?\d+")
SUFFIX = " Reply with the number only."


def last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text.replace(",", ""))
    return numbers[-1] if numbers else None


async def answer_workflow(task: dict, model: Any) -> WorkflowOutput:
    """One model call; the last number of the reply is the answer (judge `exact` compares it)."""
    call = await model.chat([{"role": "user", "content": task["question"] + SUFFIX}])
    return WorkflowOutput(response=call.content, metadata={"final_answer": last_number(call.content)})


def bench_config(folder: Path, steps: int, lr: float, val_tasks: int, new_tokens: int) -> Path:
    block = {
        "experiment_name": "bench_learning",
        "experiment_dir": str(folder / "runs"),
        "model": {"path": "builtin:smollm2-135m-instruct"},
        "task_reader": {"type": "arith", "arith": {"difficulty": "easy", "seed": 0}},
        "task_judge": {"judge_protocol": "exact"},
        "data": {"train_batch_size": 8},
        "rollout": {
            "agentscope_workflow": "bench_learning->answer_workflow",
            "num_repeat": 4,
            "temperature": 0.8,
            "max_response_length_in_one_turn": new_tokens,
            "compute_madness_checklist": [],
        },
        "trainer_common": {
            "total_training_steps": steps,
            "val_before_train": True,
            "test_freq": max(1, steps // 3),
            "save_freq": steps,
            "use_kl_loss": False,
            "optim": {"lr": lr, "weight_decay": 0.0},
            "logger": ["console"],
            "seed": 0,
        },
        "torch": {"val_max_tasks": val_tasks},
    }
    path = folder / "bench_learning.yaml"
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return path


def plot(records: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["step"], r["train/reward_mean"]) for r in records if "train/reward_mean" in r]
    val = [(r["step"], r["val/reward_mean"]) for r in records if "val/reward_mean" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(*zip(*train, strict=True), label="train reward (sampled)", color="tab:blue", alpha=0.7)
    ax.plot(*zip(*val, strict=True), "o--", label="validation reward (greedy)", color="tab:red")
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.set_title("astuner torch backbone: SmolLM2-135M-Instruct on arith (CPU)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--val-tasks", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "astuner_bench_learning.png"
    )
    args = parser.parse_args()

    from astuner_backbone_torch.backbone import TorchBackbone
    from astuner_backbone_torch.settings import TorchSettings

    sys.path.insert(0, str(HERE))
    folder = Path(tempfile.mkdtemp(prefix="astuner-bench-learning-"))
    config = load_config(
        bench_config(folder, args.steps, args.lr, args.val_tasks, args.new_tokens), backbone="torch"
    )
    experiment = ExperimentDir.create(config.experiment_dir, config.experiment_name, config.to_yaml_dict())
    started = time.perf_counter()
    settings = TorchSettings.model_validate(config.model_extra.get("torch", {}))
    TorchBackbone(settings).run(RunContext(config=config, experiment=experiment, plugins=Plugins()))
    wall = time.perf_counter() - started

    records = [json.loads(line) for line in experiment.metrics_file.read_text().splitlines()]
    val = {r["step"]: r["val/reward_mean"] for r in records if "val/reward_mean" in r}
    before, after = val[0], val[max(val)]
    steps = [r["timing/step_s"] for r in records if "timing/step_s" in r]
    plot(records, args.out)
    print(f"experiment folder: {experiment.path}")
    median = sorted(steps)[len(steps) // 2]
    print(f"steps: {args.steps}, lr {args.lr}, wall {wall / 60:.1f} min, median step {median:.1f} s")
    print(
        f"validation reward ({args.val_tasks} tasks, greedy): before {before:.3f}, after {after:.3f}, "
        f"change {after - before:+.3f}"
    )
    print(f"reward curve: {args.out}")


if __name__ == "__main__":
    main()
