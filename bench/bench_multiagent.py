"""Multi-agent training that learns: each trained role of an example against its starting adapter, on CPU.

The example (examples/order_desk by default, or examples/werewolves) trains with the torch
backbone, one LoRA adapter per trained role on the shared, frozen base model, for --steps steps.
Then `astuner eval` scores, on the first --val-tasks validation tasks x --val-samples runs each at
the training temperature (64 episodes by default), each of these line-ups, --repeats times:

- `start`: every role on its starting adapter. A new adapter is the identity, so that is the base
  model: the frozen copy of every role's start;
- `<role>`: that one role with its trained adapter (`agents.<role>.lora.path`), every other role
  on its start: the trained role against the frozen baseline of everyone else;
- `all`: every trained role with its trained adapter (`--checkpoint`).

Printed, per role: its validation reward and win rate in each line-up (each repeat, and their
mean), and whether its trained line-up beats `start` by more than the spread of the two repeats
(the larger repeat-to-repeat difference of the two line-ups); an untrained role's reward from
`start` to `all`. Then per training step: seconds (rollout, update), model calls, response tokens,
the per-role training reward and the zero-advantage group share, with the example's own
judge figures (werewolves: the share of fallback choices).

    .venv/bin/python bench/bench_multiagent.py                      # order_desk, 30 steps: ~1 hour here
    .venv/bin/python bench/bench_multiagent.py --jobs 2             # two evaluations at a time
    .venv/bin/python bench/bench_multiagent.py --run DIR            # evaluate a finished training run
    (an evaluation already in --work/eval/<line-up>-<repeat>/ with the same command is reused: rerun
    with the same --work to finish a cut-off bench)
    .venv/bin/python bench/bench_multiagent.py --example werewolves --steps 30 --val-tasks 32
    .venv/bin/python bench/bench_multiagent.py --steps 2 --val-tasks 2 --val-samples 1   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Example:
    """An example the bench trains: its config, and the judge figures printed per step."""

    conf: Path
    step_figures: tuple[str, ...]


EXAMPLES = {
    "order_desk": Example(REPO / "examples" / "order_desk" / "order_desk.yaml", ("train/judge/order_right",)),
    "werewolves": Example(
        REPO / "examples" / "werewolves" / "werewolves.yaml",
        (
            "train/judge/invalid_vote_rate",
            "train/agent/wolf/judge/fallback_rate",
            "train/agent/seer/judge/fallback_rate",
            "train/judge/village_won",
        ),
    ),
}


def astuner(args: list[str], log: Path, threads: int) -> None:
    """Run `astuner ARGS` with `threads` torch threads, its output in `log`; exit with its tail if
    it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with log.open("w", encoding="utf-8") as out:
        done = subprocess.run(
            [sys.executable, "-m", "astuner", *args], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8")[-3000:]
        sys.exit(f"astuner {args[0]} failed (exit {done.returncode}); its output: {log}\n{tail}")


def newest_folder(pattern: str, root: Path) -> Path:
    """The newest folder under `root` matching `pattern` (astuner names run folders by time)."""
    found = sorted(root.glob(pattern))
    if not found:
        sys.exit(f"nothing matches {root}/{pattern}")
    return found[-1]


def last_checkpoint(run: Path) -> Path:
    """The run's checkpoint of the highest step."""
    steps = sorted(run.glob("checkpoints/step_*"), key=lambda folder: int(folder.name.split("_")[1]))
    if not steps:
        sys.exit(f"{run} has no checkpoints/step_<n> folder")
    return steps[-1]


def train(example: Example, args: argparse.Namespace, work: Path) -> Path:
    """Train the example for `args.steps` steps; its run folder."""
    root = work / "train"
    threads = [
        "-o",
        f"torch.num_threads={args.threads}",
        "-o",
        f"rollout.engines.transformers.num_threads={args.threads}",
    ]
    command = ["run", "--conf", str(example.conf), "--backbone", "torch", "-o", f"experiment_dir={root}"]
    command += [
        "-o",
        f"trainer_common.total_training_steps={args.steps}",
        "-o",
        f"trainer_common.save_freq={args.steps}",
    ]
    command += [
        "-o",
        "trainer_common.val_before_train=false",
        "-o",
        "trainer_common.test_freq=100000",
        *threads,
    ]
    print(f"training {example.conf.parent.name} for {args.steps} steps: {root}", flush=True)
    astuner(command, work / "train.log", args.threads)
    return newest_folder("*/*", root)


def trained_roles(example: Example) -> list[str]:
    """The roles the example's config trains (`rollout.trainable_targets`)."""
    config = yaml.safe_load(example.conf.read_text(encoding="utf-8"))["astuner"]
    return list(config["rollout"]["trainable_targets"])


def line_ups(roles: list[str], checkpoint: Path) -> dict[str, list[str]]:
    """The evaluated line-ups: name -> the extra `astuner eval` arguments."""
    adapters = checkpoint / "adapters"
    found = {role: adapters / role for role in roles}
    missing = [str(folder) for folder in found.values() if not (folder / "adapter_config.json").is_file()]
    if missing:
        sys.exit(f"the checkpoint {checkpoint} lacks the adapters {', '.join(missing)}")
    ups: dict[str, list[str]] = {"start": []}
    for role, folder in found.items():
        ups[role] = ["-o", f"agents.{role}.lora.path={folder}"]
    ups["all"] = ["--checkpoint", str(checkpoint)]
    return ups


def evaluate(example: Example, extra: list[str], args: argparse.Namespace, folder: Path) -> dict[str, float]:
    """One evaluation's metrics (`eval/...`), sampled at the training temperature."""
    config = yaml.safe_load(example.conf.read_text(encoding="utf-8"))["astuner"]
    temperature = config["rollout"].get("temperature", 1.0)
    command = ["eval", "--conf", str(example.conf), "--max-tasks", str(args.val_tasks)]
    command += [
        "-k",
        str(args.val_samples),
        "--temperature",
        str(temperature),
        "-o",
        f"experiment_dir={folder}",
    ]
    command += ["-o", f"rollout.engines.transformers.num_threads={args.threads}", *extra]
    marker = folder / "command.json"  # what the evaluation in `folder` ran: reused only if the same
    if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == command:
        print(f"reusing the evaluation in {folder}", flush=True)
    else:
        folder.mkdir(parents=True, exist_ok=True)  # a new run folder: the newest summary is this one
        astuner(command, folder / "eval.log", args.threads)
        marker.write_text(json.dumps(command), encoding="utf-8")
    summary = json.loads((newest_folder("*/*/eval_summary.json", folder)).read_text(encoding="utf-8"))
    return summary["metrics"]


def step_rows(run: Path) -> list[dict[str, float]]:
    """Per training step: its metrics row, with model calls and response tokens counted from its
    rollout records."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [row for row in rows if row.get("step", 0) >= 1 and "timing/step_s" in row]
    for row in rows:
        calls = tokens = 0
        records = run / "rollouts" / f"step_{row['step']}.jsonl"
        for line in records.read_text(encoding="utf-8").splitlines():
            for call in json.loads(line)["calls"]:
                calls += 1
                tokens += len(call["response_ids"])
        row["calls"], row["response_tokens"] = calls, tokens
    return rows


def role_report(
    results: dict[str, list[dict[str, float]]], trained: list[str], roles: list[str]
) -> list[str]:
    """Per role, reward and win rate in every line-up, and the verdict against the repeats' spread."""
    lines = []
    for role in roles:
        key = f"eval/agent/{role}"
        lines.append(f"\n{role} ({'trained' if role in trained else 'untrained'}):")
        lines.append(f"  {'line-up':<10} {'reward (repeats)':<26} {'mean':>7} {'win rate':>9}")
        for name, repeats in results.items():
            rewards = [r.get(f"{key}/reward_mean", float("nan")) for r in repeats]
            wins = [r.get(f"{key}/win_rate", float("nan")) for r in repeats]
            shown = " / ".join(f"{x:.3f}" for x in rewards)
            lines.append(
                f"  {name:<10} {shown:<26} {statistics.mean(rewards):>7.3f} {statistics.mean(wins):>9.3f}"
            )
        after = role if role in trained else "all"
        before_r = [r[f"{key}/reward_mean"] for r in results["start"]]
        after_r = [r[f"{key}/reward_mean"] for r in results[after]]
        spread = max(max(before_r) - min(before_r), max(after_r) - min(after_r))
        gain = statistics.mean(after_r) - statistics.mean(before_r)
        verdict = "rises beyond the spread" if gain > spread else "within the spread"
        lines.append(f"  start -> {after}: {gain:+.3f} (spread of the repeats {spread:.3f}): {verdict}")
    return lines


def steps_report(rows: list[dict[str, float]], roles: list[str], example: Example) -> list[str]:
    """Per step the seconds, calls, tokens, per-role reward and judge figures; their first and last
    thirds; the per-step medians and means."""
    figures = [f"train/agent/{role}/reward_mean" for role in roles]
    figures += ["train/zero_adv_group_frac", *example.step_figures]
    short = [
        f.removeprefix("train/").replace("agent/", "").replace("/reward_mean", " reward") for f in figures
    ]
    head = f"{'step':>4} {'s':>6} {'rollout':>7} {'update':>6} {'calls':>5} {'tokens':>6} " + " ".join(
        f"{s:>{max(len(s), 6)}}" for s in short
    )
    lines = ["\nper training step:", head]
    for row in rows:
        cells = " ".join(
            f"{row.get(f, float('nan')):>{max(len(s), 6)}.3f}" for f, s in zip(figures, short, strict=True)
        )
        lines.append(
            f"{row['step']:>4} {row['timing/step_s']:>6.1f} {row['timing/rollout_s']:>7.1f} "
            f"{row['timing/update_s']:>6.1f} {row['calls']:>5} {row['response_tokens']:>6} {cells}"
        )
    third = max(len(rows) // 3, 1)
    for name, part in (("first third", rows[:third]), ("last third", rows[-third:])):
        means = " ".join(
            f"{s}={statistics.mean(r.get(f, float('nan')) for r in part):.3f}"
            for f, s in zip(figures, short, strict=True)
        )
        lines.append(f"{name} (steps {part[0]['step']}-{part[-1]['step']}): {means}")
    seconds = [row["timing/step_s"] for row in rows]
    calls = [row["calls"] for row in rows]
    tokens = [row["response_tokens"] for row in rows]
    lines.append(
        f"per step: median {statistics.median(seconds):.1f} s, {statistics.mean(calls):.0f} model calls, "
        f"{statistics.mean(tokens):.0f} response tokens "
        f"({sum(tokens) / sum(seconds):.1f} tokens/s over the steps)"
    )
    return lines


def step_roles(rows: list[dict[str, float]]) -> list[str]:
    """The roles with a training reward in the run's steps."""
    names = {key.split("/")[2] for row in rows for key in row if key.startswith("train/agent/")}
    return sorted(names)


def evaluate_line_ups(
    example: Example, checkpoint: Path, args: argparse.Namespace, work: Path
) -> dict[str, list[dict[str, float]]]:
    """Each line-up's metrics, `args.repeats` evaluations each, `args.jobs` at a time."""
    ups = line_ups(trained_roles(example), checkpoint)
    jobs = [(name, repeat) for name in ups for repeat in range(args.repeats)]
    print(
        f"evaluating {len(jobs)} times ({len(ups)} line-ups x {args.repeats}) from {checkpoint}", flush=True
    )

    def one(job: tuple[str, int]) -> dict[str, float]:
        return evaluate(example, ups[job[0]], args, work / "eval" / f"{job[0]}-{job[1]}")

    results: dict[str, list[dict[str, float]]] = {name: [] for name in ups}
    with ThreadPoolExecutor(args.jobs) as pool:
        for (name, _), metrics in zip(jobs, pool.map(one, jobs), strict=True):
            results[name].append(metrics)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--example", choices=sorted(EXAMPLES), default="order_desk")
    parser.add_argument("--steps", type=int, default=30, help="Training steps (default 30).")
    parser.add_argument(
        "--run", type=Path, help="A finished training run folder to evaluate instead of training."
    )
    parser.add_argument("--val-tasks", type=int, default=32, help="Validation tasks per evaluation.")
    parser.add_argument("--val-samples", type=int, default=2, help="Runs per validation task.")
    parser.add_argument("--repeats", type=int, default=2, help="Evaluations of each line-up.")
    parser.add_argument("--skip-eval", action="store_true", help="Report the training steps only.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process.")
    parser.add_argument("--jobs", type=int, default=1, help="Evaluations run at the same time.")
    parser.add_argument("--work", type=Path, help="Where runs and logs go (default: a new temporary folder).")
    args = parser.parse_args()
    example = EXAMPLES[args.example]
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-multiagent-"))
    work.mkdir(parents=True, exist_ok=True)
    run = args.run or train(example, args, work)
    rows = step_rows(run)
    roles = step_roles(rows)
    lines = [f"\n{args.example}: {run}"]
    if not args.skip_eval:
        checkpoint = last_checkpoint(run)
        results = evaluate_line_ups(example, checkpoint, args, work)
        episodes = args.val_tasks * args.val_samples
        lines.append(f"{checkpoint.name}, {episodes} validation episodes per evaluation")
        lines += role_report(results, trained_roles(example), roles)
    lines += steps_report(rows, roles, example)
    text = "\n".join(lines)
    print(text)
    (work / "report.txt").write_text(text + "\n", encoding="utf-8")
    print(f"\nreport: {work / 'report.txt'}")


if __name__ == "__main__":
    main()
