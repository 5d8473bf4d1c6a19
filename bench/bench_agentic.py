"""Agents that learn to use tools: astuner's GRPO against TRL's agent GRPO on examples/tool_agent, on CPU.

The task is examples/tool_agent: "What is 412 times 37?" with a `multiply` tool, at most three model
calls per episode, reward 1 when the last integer of the final reply is the product. SmolLM2-135M
cannot do these products by heart, so the reward measures tool use. The run:

1. The model both sides train: SmolLM2-135M-Instruct with TRL's Qwen2.5 tool template as its chat
   template (bench/trl_env.py). TRL 1.16 takes `tools=` only with templates it knows, and SmolLM2's
   own renders no tools; SmolLM2 speaks ChatML like Qwen2.5, so both get this template and feed the
   model the same tokens (agentic_trl.py checks the ids of the first prompt and of a tool turn).
2. The base model is evaluated, then warm-started with `astuner sft` on --sft-demos of the example's
   demonstrations (one epoch: enough for a first tool call, not for all of them; the whole set
   makes greedy replies perfect and leaves RL nothing to show); that checkpoint is where both RL
   runs start (the same warm start for TRL).
   No demonstration sits in the prompt (`model.tool_demonstration: []`): the warm start replaces it,
   and prompts stay short for both.
3. astuner (`astuner run --backbone torch`) and TRL (`GRPOTrainer(tools=[multiply])`, bench/agentic_trl.py)
   train from it side by side, at the same time, one CPU thread each, so both see the same machine:
   same prompts in the same order, group size, token budget, learning rate (constant, AdamW without
   weight decay), temperature 1.0, no KL, token-mean loss, and the dtype of astuner's `auto` for the
   update (its measured probe: bfloat16 autocast over float32 weights where it is faster, as on a CPU
   with AMX; TRL then gets `bf16=True`), or float32 with `--dtype float32`. TRL may run fewer steps
   (`--trl-steps`): the ratio counts the steps both sides ran at the same time.
4. The same evaluator (`astuner eval`: the first --val-tasks validation problems, --val-samples each
   at temperature 1.0, the policy RL samples from) scores the base model, the warm start and both
   sides' checkpoints every --eval-every steps.

Printed: per step for both sides, reward (mean over the step's rollouts), `episodes_with_tool_call`
(share of episodes with at least one parsed tool call), `tool_calls_per_reply` (parsed tool calls /
model replies), tool-call parse failures per episode, tool calls per episode, seconds per step; then
the same figures of validation per checkpoint; then the reward gains, the ratio of seconds per
step (TRL / astuner) and each training process's peak resident memory. Both tool-use figures are
astuner's `tool_metrics` definitions, and TRL's side (agentic_trl.EpisodeStats) counts them the
same way from its completions. One difference is TRL's by design: its `max_completion_length`
(--max-tokens) bounds a whole episode, astuner's bounds each reply.

    .venv/bin/python bench/bench_agentic.py                       # 30 steps of 4 x 4; about an hour here
    .venv/bin/python bench/bench_agentic.py --trl-steps 8   # TRL stops after 8 steps: about 40 min
    .venv/bin/python bench/bench_agentic.py --steps 2 --eval-every 2 --val-tasks 4   # a smoke run
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXAMPLE = REPO / "examples" / "tool_agent"
sys.path.insert(0, str(HERE))

import trl_env  # noqa: E402
from agentic_trl import task_module, write_tasks  # noqa: E402

from astuner.core.metrics import scalar_reward, tool_metrics  # noqa: E402
from astuner.core.trajectory import Trajectory  # noqa: E402
from astuner.record import read_trajectories  # noqa: E402


def bench_config(work: Path, model: Path, args: argparse.Namespace) -> Path:
    """examples/tool_agent/tool_agent.yaml with the bench's model, sizes and one thread per side."""
    block = yaml.safe_load((EXAMPLE / "tool_agent.yaml").read_text(encoding="utf-8"))["astuner"]
    block["experiment_dir"] = str(work / "records")
    block["model"] = {"path": str(model), "tool_demonstration": []}
    block["data"] = {"train_batch_size": args.prompts}
    block["rollout"].update(
        num_repeat=args.generations,
        temperature=1.0,
        max_response_length_in_one_turn=args.max_tokens,
        engines={"transformers": {"num_threads": args.threads}},
    )
    block["trainer_common"].update(
        total_training_steps=args.steps,
        val_before_train=False,
        test_freq=args.steps + 1,
        save_freq=args.eval_every,
        seed=args.seed,
        optim={"lr": args.lr, "weight_decay": 0.0},
    )
    block["torch"] = {
        "num_threads": args.threads,
        "train_dtype": args.dtype,
        "gen_dtype": args.dtype,
        "sft": {"epochs": args.sft_epochs, "lr": args.sft_lr, "batch_size": 8},
    }
    block.pop("debug", None)
    path = work / "bench.yaml"
    path.write_text(yaml.safe_dump({"astuner": block}, sort_keys=False), encoding="utf-8")
    return path


def astuner(*args: str, threads: int, log: Path) -> subprocess.Popen[str]:
    """`astuner ARGS` in the example's folder (its workflow module), limited to `threads` threads,
    its output written to `log`."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with log.open("w", encoding="utf-8") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "astuner", *args],
            cwd=EXAMPLE,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def finish(process: subprocess.Popen[str], what: str, log: Path) -> tuple[str, float]:
    """Wait for `process`; its output (from `log`) and its peak resident memory in MiB (the kernel's
    maximum RSS of that process, from `wait4`). Exits with the output's tail if it failed."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    output = log.read_text(encoding="utf-8")
    if process.returncode != 0:
        sys.exit(f"{what} failed (exit {process.returncode}); its output: {log}\n{output[-3000:]}")
    return output, usage.ru_maxrss / 1024


def line_value(output: str, label: str) -> str:
    """The value after `label` on the first output line that starts with it."""
    for line in map(str.strip, output.splitlines()):  # closing lines are indented
        if line.startswith(label):
            return line[len(label) :].split("   ")[0].strip()
    raise SystemExit(f"no '{label}' line in:\n{output[-2000:]}")


# ---------------------------------------------------------------- episode figures, both sides alike


def episode_figures(trajectories: list[Trajectory]) -> dict[str, float]:
    """Reward, the two tool-use shares as astuner's runs report them (`tool_metrics`), and parse
    failures and tool calls per episode."""
    n = max(len(trajectories), 1)
    rewards = [scalar_reward(t) or 0.0 for t in trajectories]
    tools = tool_metrics(trajectories, "bench")
    return {
        "reward": sum(rewards) / n,
        "episodes_with_tool_call": tools["bench/episodes_with_tool_call"],
        "tool_calls_per_reply": tools["bench/tool_calls_per_reply"],
        "parse_failures": tools["bench/tool_parse_failures"] / n,
        "calls_per_episode": tools["bench/tool_calls_parsed"] / n,
    }


def evaluate(conf: Path, checkpoint: Path | None, args: argparse.Namespace, work: Path, name: str) -> dict:
    """Validation figures of a model folder (None: the config's model), sampled as in training."""
    extra = ["--checkpoint", str(checkpoint)] if checkpoint else []
    command = ["eval", "--conf", str(conf), "--max-tasks", str(args.val_tasks), "-k", str(args.val_samples)]
    command += ["--temperature", "1.0", *extra]
    log = work / f"eval-{name}.log"
    output, _ = finish(astuner(*command, threads=2 * args.threads, log=log), f"eval of {name}", log)
    return episode_figures(read_trajectories(Path(line_value(output, "trajectories:"))))


def step_order(conf: Path, steps: int) -> list[list[tuple[str, str]]]:
    """The (question, answer) pairs of each training step, in the torch backbone's own data order."""
    from astuner_backbone_torch.data import TaskStream

    from astuner.components import build_reader
    from astuner.config import load_config
    from astuner.plugins import Plugins

    config = load_config(conf, backbone="torch")
    tasks = list(build_reader(config, Plugins()).read("train"))
    stream = TaskStream(tasks, config.data.train_batch_size, config.trainer_common.seed)
    return [[(t.main_query, t.metadata["answer"]) for t in stream.next_batch()] for _ in range(steps)]


def update_in_bf16(model_dir: Path, threads: int) -> bool:
    """Whether astuner's `train_dtype: auto` picks bfloat16 for `model_dir` here with `threads` torch
    threads (its cached probe, whose verdict is per thread count: the run's, not this process's)."""
    import torch
    from astuner_backbone_torch.dtype_probe import fastest_cpu_train_dtype
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fastest_cpu_train_dtype(model) == torch.bfloat16
    finally:
        torch.set_num_threads(before)


def astuner_steps(run: Path, steps: int) -> list[dict[str, float]]:
    metrics = {m["step"]: m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    rows = []
    for step in range(1, steps + 1):
        m = metrics.get(step, {})
        figures = episode_figures(read_trajectories(run / "rollouts" / f"step_{step}.jsonl"))
        figures["step_s"] = m.get("timing/step_s", 0.0) - m.get("timing/save_s", 0.0)
        rows.append(figures)
    return rows


def trl_steps(out: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    return [
        {
            "reward": r["reward"],
            "episodes_with_tool_call": r["episodes_with_tool_call"],
            "tool_calls_per_reply": r["tool_calls_per_reply"],
            "parse_failures": r["parse_failures_per_episode"],
            "calls_per_episode": r["calls_written_per_episode"],
            "step_s": r["step_s"],
        }
        for r in rows
    ]


# ---------------------------------------------------------------- report


def while_both_ran(
    ours: list[dict[str, float]], theirs: list[dict[str, float]]
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """The first n steps of each side, n being how many steps both sides finished before the first
    to stop did (both start together; at least one).

    Steps run alone afterwards see a quieter machine, and a step's work depends on how far training
    has come (a trained policy writes shorter episodes), so only the same steps, run side by side,
    compare fairly. The side that stops first is not always the slower one: TRL may run fewer steps
    (`--trl-steps`).
    """
    ends = [list(itertools.accumulate(r["step_s"] for r in rows)) for rows in (ours, theirs)]
    end = min(side[-1] for side in ends)  # when the first side stopped
    n = max(1, min(sum(1 for t in side if t <= end) for side in ends))
    return ours[:n], theirs[:n]


def fmt(row: dict[str, float]) -> str:
    return (
        f"{row['reward']:6.3f} {row['episodes_with_tool_call']:6.3f} {row['tool_calls_per_reply']:6.3f} "
        f"{row['parse_failures']:6.3f} {row['calls_per_episode']:6.2f} {row.get('step_s', float('nan')):7.1f}"
    )


def report(
    ours: list[dict[str, float]],
    theirs: list[dict[str, float]],
    evals: dict[str, dict],
    peaks: dict[str, float],
    bf16: bool,
    args: argparse.Namespace,
) -> None:
    head = "reward ep_w/c call/r  parse  calls  s/step"
    print(f"\nper training step ({args.prompts} prompts x {args.generations} samples, temperature 1.0)")
    print(
        "ep_w/c: episodes_with_tool_call (episodes with a parsed tool call / episodes); "
        "call/r: tool_calls_per_reply (parsed calls / replies); parse, calls: per episode"
    )
    print(f"step | astuner: {head} | TRL: {head}")
    for step, (a, t) in enumerate(zip(ours, theirs, strict=False), 1):
        print(f"{step:4d} | {'':9}{fmt(a)} | {'':5}{fmt(t)}")
    print(
        f"\nvalidation (first {args.val_tasks} problems x {args.val_samples} samples at temperature 1.0): "
        "reward, episodes_with_tool_call, tool_calls_per_reply, calls per episode"
    )
    for name, e in evals.items():
        print(
            f"  {name:<16} {e['reward']:6.3f} {e['episodes_with_tool_call']:6.3f} "
            f"{e['tool_calls_per_reply']:6.3f} {e['calls_per_episode']:6.2f}"
        )
    start = evals["warm start"]["reward"]
    last = args.steps
    gain_a = evals.get(f"astuner step {last}", {}).get("reward", float("nan")) - start
    gain_t = evals.get(f"TRL step {last}", {}).get("reward", float("nan")) - start
    a, t = while_both_ran(ours, theirs)
    s_a = statistics.median(r["step_s"] for r in a)
    s_t = statistics.median(r["step_s"] for r in t)
    print(
        f"\nvalidation reward gain over {last} steps from the warm start: "
        f"astuner {gain_a:+.3f}, TRL {gain_t:+.3f}"
    )
    print(
        f"median s/step while both ran (astuner steps 1-{len(a)}, TRL steps 1-{len(t)}): "
        f"astuner {s_a:.1f}, TRL {s_t:.1f}; TRL / astuner = {s_t / s_a:.2f}x"
    )
    print(
        f"peak resident memory of each training process: astuner {peaks['astuner']:.0f} MiB, "
        f"TRL {peaks['TRL']:.0f} MiB"
    )
    print(
        "fairness: both sides train SmolLM2-135M-Instruct with TRL's Qwen2.5 tool template (SmolLM2's own "
        "renders no tools, and TRL 1.16 refuses templates it does not know), from the same astuner sft "
        "checkpoint, one CPU thread each, at the same time, in the dtype astuner's measured probe picks for "
        f"the update on this machine ({args.dtype} here: {'bfloat16 autocast' if bf16 else 'float32'}; TRL's "
        "bf16 flag follows it)."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=4, help="Prompts per step.")
    parser.add_argument("--generations", type=int, default=4, help="Samples per prompt (group size).")
    parser.add_argument("--max-tokens", type=int, default=128, help="Token budget (see the module doc).")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--sft-epochs", type=int, default=1)
    parser.add_argument(
        "--sft-demos", type=int, default=32, help="Demonstrations the warm start uses (of the example's 64)."
    )
    parser.add_argument("--val-samples", type=int, default=2, help="Samples per validation problem.")
    parser.add_argument("--sft-lr", type=float, default=2e-5)
    parser.add_argument("--val-tasks", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per side.")
    parser.add_argument(
        "--dtype",
        choices=["auto", "float32"],
        default="auto",
        help="astuner's train_dtype and gen_dtype (auto: its measured probe); TRL gets bf16=True when the "
        "probe picks bfloat16 for the update.",
    )
    parser.add_argument(
        "--trl-steps",
        type=int,
        default=0,
        help="Steps TRL runs (0: --steps). Fewer keep the bench short: the ratio counts only the steps both "
        "sides ran at the same time.",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="Folder for everything (default: a temp one)."
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-agentic-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work folder: {work}")
    began = time.perf_counter()

    python = trl_env.trl_python()
    model = trl_env.tool_model_dir(work / "model", python)
    conf = bench_config(work, model, args)
    evals: dict[str, dict] = {"base model": evaluate(conf, None, args, work, "base")}
    print(f"base model: {evals['base model']}", flush=True)

    demos = work / "demonstrations.jsonl"
    lines = (EXAMPLE / "demonstrations.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    demos.write_text("".join(lines[: args.sft_demos]), encoding="utf-8")
    sft = astuner("sft", "--conf", str(conf), "--from", str(demos), threads=2, log=work / "sft.log")
    warm = Path(line_value(finish(sft, "astuner sft", work / "sft.log")[0], "checkpoint:"))
    evals["warm start"] = evaluate(conf, warm, args, work, "warm")
    bf16 = args.dtype == "auto" and update_in_bf16(warm, args.threads)
    print(f"warm start ({warm}): {evals['warm start']}", flush=True)

    tasks = work / "tasks.json"
    write_tasks(tasks, step_order(conf, args.steps), task_module().SYSTEM_PROMPT)
    trl_steps_run = args.trl_steps or args.steps
    saves = [s for s in range(args.eval_every, args.steps + 1, args.eval_every) if s <= trl_steps_run]
    trl_out = work / "trl"
    trl_command = [str(python), str(HERE / "agentic_trl.py"), "--model", str(warm)]
    trl_command += ["--steps", str(trl_steps_run), "--prompts", str(args.prompts)]
    trl_command += ["--generations", str(args.generations), "--max-tokens", str(args.max_tokens)]
    trl_command += ["--lr", str(args.lr), "--seed", str(args.seed), "--tasks", str(tasks)]
    trl_command += ["--save-steps", ",".join(map(str, saves)), "--out", str(trl_out)]
    trl_command += ["--threads", str(args.threads), *(["--bf16"] if bf16 else [])]
    trl_log = work / "trl.log"
    with trl_log.open("w", encoding="utf-8") as out:
        trl = subprocess.Popen(
            trl_command,
            env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    run_log = work / "astuner-run.log"
    ours = astuner(
        "run",
        "--conf",
        str(conf),
        "--backbone",
        "torch",
        "-o",
        f"model.path={warm}",
        threads=args.threads,
        log=run_log,
    )
    peaks = {"astuner": finish(ours, "astuner run", run_log)[1], "TRL": finish(trl, "TRL", trl_log)[1]}
    run = max((work / "records" / conf.stem).iterdir(), key=lambda p: p.stat().st_mtime)

    for step in range(args.eval_every, args.steps + 1, args.eval_every):
        evals[f"astuner step {step}"] = evaluate(
            conf, run / "checkpoints" / f"step_{step}", args, work, f"a{step}"
        )
        if step in saves:
            evals[f"TRL step {step}"] = evaluate(conf, trl_out / f"step_{step}", args, work, f"t{step}")
    report(astuner_steps(run, args.steps), trl_steps(trl_out), evals, peaks, bf16, args)
    print(f"\nwall {(time.perf_counter() - began) / 60:.1f} min; logs and records in {work}")


if __name__ == "__main__":
    main()
