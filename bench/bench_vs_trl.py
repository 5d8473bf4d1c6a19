"""Seconds per GRPO step: astuner's `torch` backbone against TRL's GRPOTrainer, on CPU.

Both sides train SmolLM2-135M-Instruct (`builtin:smollm2-135m-instruct`) on
the same a+b prompts in the same order with the same exact-answer reward:
8 prompts x 4 generations per step, at most 128 new tokens, temperature 1,
learning rate 1e-5 (constant), AdamW without weight decay, gradient
clipping 1.0, no KL, a token-mean loss (TRL's `dapo`), float32 weights,
gradient checkpointing off on both. Both sides compute in the dtype
astuner's `auto` picks for the machine: bf16 autocast where bf16 is faster
(a GPU, a CPU with AMX; TRL's `bf16=True`), else float32 (TRL's
`bf16=False`), which on a CPU with only AVX512-BF16 is faster for both.

astuner skips the forward/backward of samples whose advantage is 0 on
every token (equal-reward groups; their gradient is 0); TRL computes them.
`--keep-zero-advantage` turns the skip off, to see the rest of the
difference on its own.
Each side runs in its own process; runs alternate A/B/A/B so both see the
same machine load. Printed: per-step times, the median seconds per step of
each and the ratio TRL / astuner (with the generation and update parts).

TRL is not a dependency of astuner: the first run builds a throw-away
virtual environment under the system temp folder that sees the project's
.venv (a .pth file) and adds TRL there; later runs reuse it (bench/trl_env.py).

    .venv/bin/python bench/bench_vs_trl.py                   # 2 rounds x 4 steps per side, ~14 min (2 cores)
    .venv/bin/python bench/bench_vs_trl.py --rounds 1 --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trl_env import time_generate, trl_python

HERE = Path(__file__).resolve().parent
PROMPTS, GENERATIONS, NEW_TOKENS, LR, SEED = 8, 4, 128, 1e-5, 0
SUFFIX = " Reply with the number only."
_NUMBER = re.compile(r"-?\d+")


# ---------------------------------------------------------------- shared task


def problems(n: int) -> list[dict[str, str]]:
    """`n` a+b questions (a, b in 2..20) with their answers, the same on every run."""
    rng = random.Random(SEED)
    out = []
    for i in range(n):
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        out.append({"id": f"add-{i:03d}", "question": f"What is {a} + {b}?{SUFFIX}", "answer": str(a + b)})
    return out


def reward(text: str, answer: str) -> float:
    """1.0 when the last integer of the reply is the answer."""
    return 1.0 if _NUMBER.findall(text)[-1:] == [answer] else 0.0


def step_order(tasks: list[dict[str, str]], steps: int) -> list[list[dict[str, str]]]:
    """The prompts of each step, in astuner's own data order (so TRL gets exactly the same)."""
    from astuner_backbone_torch.data import TaskStream

    from astuner.core.task import Task

    by_id = {t["id"]: t for t in tasks}
    stream = TaskStream([Task(task_id=t["id"], main_query=t["question"]) for t in tasks], PROMPTS, SEED)
    return [[by_id[task.task_id] for task in stream.next_batch()] for _ in range(steps)]


def emit(record: dict[str, Any]) -> None:
    print("STEP " + json.dumps(record), flush=True)


# ---------------------------------------------------------------- side A: astuner


async def add_workflow(task: dict, model: Any) -> Any:
    from astuner.core.task import WorkflowOutput

    call = await model.chat([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(response=call.content, reward=reward(call.content, task["answer"]))


def run_astuner(steps: int, workdir: Path, skip_zero_advantage: bool) -> None:
    import yaml
    from astuner_backbone_torch.backbone import TorchBackbone
    from astuner_backbone_torch.settings import TorchSettings

    from astuner.config import load_config
    from astuner.plugins import Plugins
    from astuner.protocols import RunContext
    from astuner.record import ExperimentDir

    tasks = problems(PROMPTS * steps)
    data = workdir / "tasks.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    block = {
        "experiment_name": "bench_vs_trl",
        "experiment_dir": str(workdir / "runs"),
        "model": {"path": "builtin:smollm2-135m-instruct"},
        "task_reader": {"type": "jsonl", "jsonl": {"training_file": str(data), "id_field": "id"}},
        "data": {"train_batch_size": PROMPTS},
        "rollout": {
            "agentscope_workflow": "bench_vs_trl->add_workflow",
            "num_repeat": GENERATIONS,
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": -1,
            "max_response_length_in_one_turn": NEW_TOKENS,
            "compute_madness_checklist": [],
        },
        "trainer_common": {
            "total_training_steps": steps,
            "save_freq": 10_000,
            "test_freq": 10_000,
            "use_kl_loss": False,
            "grad_clip": 1.0,
            "loss_agg_mode": "token-mean",
            "optim": {"lr": LR, "weight_decay": 0.0},
            "logger": ["console"],
            "seed": SEED,
        },
    }
    conf = workdir / "astuner.yaml"
    conf.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    config = load_config(conf, backbone="torch")
    experiment = ExperimentDir.create(config.experiment_dir, config.experiment_name, config.to_yaml_dict())
    backbone = TorchBackbone(TorchSettings(skip_zero_advantage=skip_zero_advantage))
    backbone.run(RunContext(config=config, experiment=experiment, plugins=Plugins()))
    for line in experiment.metrics_file.read_text().splitlines():
        m = json.loads(line)
        if "timing/step_s" not in m:
            continue
        emit(
            {
                "side": "astuner",
                "step": m["step"],
                "step_s": m["timing/step_s"],
                "gen_s": m["timing/rollout_s"],
                "update_s": m["timing/update_s"],
                "reward": m["train/reward_mean"],
                "tokens": m["actor/tokens_trained"],
                "skipped": m["actor/skipped_samples"],
            }
        )


# ---------------------------------------------------------------- side B: TRL


def run_trl(steps: int, workdir: Path) -> None:
    import torch
    from astuner_backbone_torch.models import resolve_model_dir
    from astuner_backbone_torch.policy import native_bf16, pick_device
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(os.cpu_count() or 1)
    model_dir = resolve_model_dir("builtin:smollm2-135m-instruct")
    ordered = [t for batch in step_order(problems(PROMPTS * steps), steps) for t in batch]
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": t["question"]}], "answer": t["answer"]} for t in ordered]
    )

    def exact(completions: list, answer: list, **_: Any) -> list[float]:
        return [reward(c[-1]["content"], a) for c, a in zip(completions, answer, strict=True)]

    args = GRPOConfig(
        output_dir=str(workdir / "trl"),
        use_cpu=not torch.cuda.is_available(),
        bf16=native_bf16(pick_device("auto")),
        per_device_train_batch_size=PROMPTS,
        gradient_accumulation_steps=GENERATIONS,
        num_generations=GENERATIONS,
        num_iterations=1,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        optim="adamw_torch",
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        gradient_checkpointing=False,
        shuffle_dataset=False,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=SEED,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = GRPOTrainer(
        model=model, reward_funcs=exact, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    timing = time_generate(model)

    class StepTimer(TrainerCallback):
        """Times each step at on_step_end; prints it at on_log, which TRL calls after on_step_end
        with that step's metrics (state.log_history at on_step_end still ends with the step before)."""

        def __init__(self) -> None:
            self.last = time.perf_counter()
            self.step: dict[str, Any] = {}

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            now = time.perf_counter()
            self.step = {
                "side": "trl",
                "step": state.global_step,
                "step_s": now - self.last,
                "gen_s": timing["gen"],
                "update_s": now - self.last - timing["gen"],
            }
            timing["gen"] = 0.0
            self.last = now

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            if self.step and "reward" in (logs or {}):
                emit({**self.step, "reward": logs["reward"]})
                self.step = {}

    trainer.add_callback(StepTimer())
    trainer.train()


# ---------------------------------------------------------------- orchestration


def run_side(python: Path, side: str, steps: int, extra: list[str]) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix=f"astuner-bench-{side}-") as workdir:
        command = [str(python), str(Path(__file__).resolve()), "--side", side, "--steps", str(steps)]
        command += ["--workdir", workdir, *extra]
        result = subprocess.run(command, cwd=HERE, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{side} run failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return [json.loads(line[5:]) for line in result.stdout.splitlines() if line.startswith("STEP ")]


def report(records: list[dict[str, Any]]) -> None:
    print(f"\n{'side':8} {'round':>5} {'step':>4} {'step s':>7} {'gen s':>7} {'update s':>8} {'reward':>6}")
    for r in records:
        reward_text = "-" if r.get("reward") is None else f"{r['reward']:.3f}"
        print(
            f"{r['side']:8} {r['round']:>5} {r['step']:>4} {r['step_s']:7.1f} {r['gen_s']:7.1f} "
            f"{r['update_s']:8.1f} {reward_text:>6}"
        )

    def median(side: str, key: str) -> float:
        return statistics.median(r[key] for r in records if r["side"] == side)

    print(
        f"\nmedian seconds per step ({PROMPTS} prompts x {GENERATIONS} generations, "
        f"<= {NEW_TOKENS} new tokens)"
    )
    print(f"{'':10} {'astuner':>9} {'TRL':>9} {'TRL/astuner':>12}")
    for key, label in (("step_s", "step"), ("gen_s", "generation"), ("update_s", "update")):
        a, t = median("astuner", key), median("trl", key)
        print(f"{label:10} {a:9.1f} {t:9.1f} {t / a:11.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="A/B rounds; each runs both sides once.")
    parser.add_argument("--steps", type=int, default=4, help="Optimizer steps per side per round.")
    parser.add_argument(
        "--keep-zero-advantage",
        action="store_true",
        help="astuner trains on zero-advantage samples too, as TRL does (torch.skip_zero_advantage: false).",
    )
    parser.add_argument("--side", choices=["astuner", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "astuner":
        sys.path.insert(0, str(HERE))
        run_astuner(args.steps, args.workdir, skip_zero_advantage=not args.keep_zero_advantage)
        return
    if args.side == "trl":
        run_trl(args.steps, args.workdir)
        return
    python = trl_python()
    records = []
    for round_ in range(args.rounds):
        for side in ("astuner", "trl") if round_ % 2 == 0 else ("trl", "astuner"):
            began = time.perf_counter()
            extra = ["--keep-zero-advantage"] if args.keep_zero_advantage and side == "astuner" else []
            got = run_side(python, side, args.steps, extra)
            print(
                f"round {round_} {side}: {len(got)} steps in {time.perf_counter() - began:.0f} s", flush=True
            )
            for record in got:  # as they come, so an interrupted benchmark still shows what it measured
                print("  " + json.dumps(record), flush=True)
            records += [{**r, "round": round_} for r in got]
    report(records)


if __name__ == "__main__":
    main()
