"""Asynchronous rollouts: the same training run at trainer_common.max_staleness 0, 1 and 2, on CPU.

With `max_staleness: N` > 0 the torch backbone generates the next N steps' rollouts while the
current update trains (plugins/backbone-torch/README.md, "Asynchronous rollouts"). What that buys
depends on what a rollout waits for, so the bench has two tasks:

- `--task latency`: examples/env_agent, a multi-turn agent on the reference environment service's
  guess_number game, with every environment step delayed by --step-delay seconds (default 1.0; the
  server's `--step-delay`, awaited, so steps of different episodes overlap). The bench starts the
  server on a free 127.0.0.1 port before each run and stops it (its process, by PID) after; the
  run's `task_reader.env_service.env_url` points at it. The waiting uses no CPU, which is what
  asynchronous rollouts should fill with the update.
- `--task tool_agent`: examples/tool_agent (multiplication with a `multiply` tool) with no latency:
  rollouts and update both need the CPU, so on a 2-core machine the gain may be small or negative.

Each setting is one `astuner run --backbone torch` of the example's config with `-o` overrides, the
same for all three but `trainer_common.max_staleness`: the same model and seed (so the same tasks
in the same order, and the same validation tasks), the same sizes, and
`trainer_common.algorithm.rollout_correction.rollout_is: token` for all three, including the
synchronous one (which staleness > 0 requires), so only staleness differs. Both tasks train with
--lr (constant) and no KL term (env_agent's own config sets neither; tool_agent's sets the same).
Validation runs before training and after the last step (`val_before_train`, `test_freq` = --steps)
on the first --val-tasks validation tasks, greedy (the default `rollout.val_kwargs`). The settings
run one after another, never together: together they would share the machine's cores, and each
setting's seconds per step would measure the others too. torch gets --threads threads per process
(OMP and MKL pinned alike); in an asynchronous run the update and the generation each use them, at
the same time.

Printed per setting: median and mean seconds per step (the step's wall time without its validation
and checkpoint save), and the per-step means of `timing/rollout_s` (a batch's generation time; in an
asynchronous run it overlaps the updates before it), `timing/update_s`, `timing/wait_rollout_s` (the
trainer waited for its batch) and `timing/wait_weights_s` (generation idle until the new weights),
`async/staleness_mean` and `async/staleness_max` (the max over steps), the mean training reward
(`train/reward_mean`) over the first and the last third of the steps, and `val/reward_mean` before
and after training; then each step's seconds and training reward side by side. The same text goes to
<work>/report.txt; every run's log and records stay under <work>/<setting>/.

    .venv/bin/python bench/bench_async.py --task latency          # 3 x 30 steps of 8 x 4 episodes
    .venv/bin/python bench/bench_async.py --task tool_agent
    .venv/bin/python bench/bench_async.py --task latency --steps 2 --batch 2 --num-repeat 2 \\
        --val-tasks 2 --step-delay 0.2                             # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from astuner.api import Companion, free_port

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Task:
    """A task the bench trains: its config, and whether it needs the reference environment server."""

    conf: Path
    env: str | None


TASKS = {
    "latency": Task(REPO / "examples" / "env_agent" / "env_agent.yaml", "guess_number"),
    "tool_agent": Task(REPO / "examples" / "tool_agent" / "tool_agent.yaml", None),
}
SETTINGS = (0, 1, 2)


@contextlib.contextmanager
def env_server(env: str | None, delay: float, log: Path) -> Iterator[list[str]]:
    """The reference environment server for `env` with `delay` s per step on a free port, for as
    long as the block runs; yields the `-o` overrides that point the run at it (none without `env`).

    `Companion` starts it in a session of its own, waits for `/healthz`, and stops that process
    (its PID's group) when the block ends, however it ends.
    """
    if env is None:
        yield []
        return
    port = free_port()
    argv = [sys.executable, "-m", "astuner", "envservice", "serve", "--env", env, "--port", str(port)]
    argv += ["--step-delay", str(delay)]
    with Companion(
        f"environment service '{env}'",
        argv,
        health_url=f"http://127.0.0.1:{port}/healthz",
        log_path=log,
    ):
        yield ["-o", f"task_reader.env_service.env_url=http://127.0.0.1:{port}"]


def overrides(staleness: int, folder: Path, args: argparse.Namespace) -> list[str]:
    """The `-o` overrides of one setting: everything but `max_staleness` is the same for all three."""
    values = {
        "experiment_dir": folder / "records",
        "data.train_batch_size": args.batch,
        "rollout.num_repeat": args.num_repeat,
        "rollout.engines.transformers.num_threads": args.threads,
        "torch.num_threads": args.threads,
        "torch.val_max_tasks": args.val_tasks,
        "trainer_common.total_training_steps": args.steps,
        "trainer_common.val_before_train": "true",
        "trainer_common.test_freq": args.steps,
        "trainer_common.save_freq": args.steps,
        "trainer_common.seed": args.seed,
        "trainer_common.use_kl_loss": "false",
        "trainer_common.optim.lr": args.lr,
        "trainer_common.algorithm.rollout_correction.rollout_is": "token",
        "trainer_common.max_staleness": staleness,
    }
    if args.model:
        values["model.path"] = args.model
    return [item for key, value in values.items() for item in ("-o", f"{key}={value}")] + [
        item for setting in args.set for item in ("-o", setting)
    ]


def train(task: Task, staleness: int, args: argparse.Namespace, work: Path) -> Path:
    """One setting's run (its server around it, if the task has one); its run folder."""
    folder = work / f"staleness_{staleness}"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "run.log"
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    print(f"max_staleness {staleness}: training {args.steps} steps, log {log}", flush=True)
    began = time.perf_counter()
    with env_server(task.env, args.step_delay, folder / "envservice.log") as server:
        command = [sys.executable, "-m", "astuner", "run", "--conf", str(task.conf), "--backbone", "torch"]
        command += [*overrides(staleness, folder, args), *server]
        with log.open("w", encoding="utf-8") as out:
            done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8")[-3000:]
        sys.exit(f"max_staleness {staleness} failed (exit {done.returncode}); its output: {log}\n{tail}")
    print(f"max_staleness {staleness}: done in {(time.perf_counter() - began) / 60:.1f} min", flush=True)
    runs = sorted((folder / "records").glob("*/*/metrics.jsonl"), key=lambda p: p.stat().st_mtime)
    if not runs:
        sys.exit(f"no run folder with metrics.jsonl under {folder / 'records'}")
    return runs[-1].parent


@dataclass
class Summary:
    """One setting's figures (see the module docstring)."""

    steps: list[dict[str, float]]
    val_before: float
    val_after: float

    def step_seconds(self) -> list[float]:
        """Each step's wall time without its validation and checkpoint save."""
        return [
            row["timing/step_s"] - row.get("timing/val_s", 0.0) - row.get("timing/save_s", 0.0)
            for row in self.steps
        ]

    def mean(self, key: str) -> float:
        """`key`'s mean over the steps that logged it; nan when none did (the synchronous run logs no
        waits: printed as '-', not as a wait of 0)."""
        values = [row[key] for row in self.steps if key in row]
        return statistics.mean(values) if values else float("nan")

    def reward(self, part: str) -> float:
        """The mean training reward over the `part` ('first' or 'last') third of the steps."""
        third = max(len(self.steps) // 3, 1)
        rows = self.steps[:third] if part == "first" else self.steps[-third:]
        return statistics.mean(row.get("train/reward_mean", float("nan")) for row in rows)


def summarize(run: Path) -> Summary:
    """The figures of a run folder's metrics.jsonl: its training steps, and validation at step 0 and
    at its last step."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    steps = [row for row in rows if row.get("step", 0) >= 1 and "timing/step_s" in row]
    vals = [row for row in rows if "val/reward_mean" in row]
    if not steps or not vals:
        sys.exit(f"{run}/metrics.jsonl has no training steps or no validation")
    before = next((row["val/reward_mean"] for row in vals if row["step"] == 0), float("nan"))
    return Summary(steps, before, vals[-1]["val/reward_mean"] if vals[-1]["step"] > 0 else float("nan"))


def cell(value: float, width: int, digits: int) -> str:
    """`value` right-aligned in `width` characters, '-' for nan (a figure the run did not log)."""
    return f"{'-':>{width}}" if value != value else f"{value:>{width}.{digits}f}"


def report(results: dict[int, Summary], runs: dict[int, Path], args: argparse.Namespace) -> str:
    """The side-by-side table of the settings, the speed ratios, and each step's seconds and reward."""
    lines = [
        f"\n{args.task}: {args.steps} steps of {args.batch} tasks x {args.num_repeat} rollouts, "
        f"{args.threads} torch threads, seed {args.seed}, lr {args.lr}, rollout_is token in every setting"
        + (f", environment step delay {args.step_delay:g} s" if TASKS[args.task].env else "")
        + "".join(f", {setting}" for setting in args.set),
        "seconds per step exclude validation and the checkpoint save; rollout/update/wait: means per step",
        f"{'staleness':>9} {'med s/st':>8} {'mean s/st':>9} {'rollout':>7} {'update':>6} {'wait_ro':>7} "
        f"{'wait_wt':>7} {'stale':>5} {'max':>3} {'R 1st3':>6} {'R last3':>7} {'val0':>6} {'valN':>6}",
    ]
    for staleness, s in results.items():
        seconds = s.step_seconds()
        lines.append(
            f"{staleness:>9} {statistics.median(seconds):>8.1f} {statistics.mean(seconds):>9.1f} "
            f"{cell(s.mean('timing/rollout_s'), 7, 1)} {cell(s.mean('timing/update_s'), 6, 1)} "
            f"{cell(s.mean('timing/wait_rollout_s'), 7, 1)} {cell(s.mean('timing/wait_weights_s'), 7, 1)} "
            f"{cell(s.mean('async/staleness_mean'), 5, 2)} "
            f"{max(row.get('async/staleness_max', 0.0) for row in s.steps):>3.0f} "
            f"{s.reward('first'):>6.3f} {s.reward('last'):>7.3f} {s.val_before:>6.3f} {s.val_after:>6.3f}"
        )
    first, *others = results
    base = statistics.mean(results[first].step_seconds())
    for staleness in others:
        ratio = base / statistics.mean(results[staleness].step_seconds())
        lines.append(
            f"max_staleness {staleness}: {ratio:.2f}x the steps per second of max_staleness {first} (means)"
        )
    lines.append("\nper step: seconds / training reward")
    lines.append(f"{'step':>4} " + " ".join(f"{f'staleness {n}':>16}" for n in results))
    seconds = {n: s.step_seconds() for n, s in results.items()}
    for i in range(min(len(s.steps) for s in results.values())):
        cells = " ".join(
            f"{seconds[n][i]:>8.1f} {s.steps[i].get('train/reward_mean', float('nan')):>7.3f}"
            for n, s in results.items()
        )
        lines.append(f"{i + 1:>4} {cells}")
    lines.append("")
    lines += [f"run folder, max_staleness {n}: {run}" for n, run in runs.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", choices=sorted(TASKS), default="latency")
    parser.add_argument("--steps", type=int, default=30, help="Training steps per setting.")
    parser.add_argument("--batch", type=int, default=8, help="Tasks per step (data.train_batch_size).")
    parser.add_argument("--num-repeat", type=int, default=4, help="Rollouts per task (the GRPO group).")
    parser.add_argument("--val-tasks", type=int, default=16, help="Validation tasks (torch.val_max_tasks).")
    parser.add_argument(
        "--step-delay", type=float, default=1.0, help="Seconds per environment step (--task latency)."
    )
    parser.add_argument("--lr", type=float, default=2e-5, help="Learning rate (constant), every setting.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each run.")
    parser.add_argument("--model", default="", help="model.path (default: the example's own).")
    parser.add_argument(
        "--staleness",
        type=int,
        nargs="+",
        default=list(SETTINGS),
        help="Settings of max_staleness to run, in order (default 0 1 2); the first is the baseline "
        "of the speed ratios.",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="One more `-o` override for every setting (repeatable), e.g. rollout.multi_turn.max_steps=5.",
    )
    parser.add_argument("--work", type=Path, help="Where runs and logs go (default: a new temporary folder).")
    args = parser.parse_args()
    task = TASKS[args.task]
    # absolute: the runs start in the repository's folder, the results are read from here
    work = (args.work or Path(tempfile.mkdtemp(prefix="bench-async-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"work folder: {work}", flush=True)
    runs = {staleness: train(task, staleness, args, work) for staleness in args.staleness}
    results = {staleness: summarize(run) for staleness, run in runs.items()}
    text = report(results, runs, args)
    print(text)
    (work / "report.txt").write_text(text + "\n", encoding="utf-8")
    print(f"\nreport: {work / 'report.txt'}")


if __name__ == "__main__":
    main()
