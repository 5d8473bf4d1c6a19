"""Rollout throughput: the whole stack's overhead, and the transformers engine's batching.

    .venv/bin/python bench/bench_rollout.py            # everything (SmolLM2 part takes ~1-2 min)
    .venv/bin/python bench/bench_rollout.py --skip-model

1. LLM calls per second through runner -> ModelTuner -> context tracker with an
   instant scripted engine and the real SmolLM2 tokenizer: in-process
   (`model_tuner.chat`) and over HTTP through the OpenAI gateway, with a lean
   client (httpx) and with the `openai` SDK. Targets on a 2-core machine:
   >= 1,000 calls/s in-process, >= 300 calls/s over HTTP. The SDK figure is
   bound by the SDK's own request building (it deep-walks the message list
   on every call), shown for reference.
2. Generated tokens per second of the `transformers` engine serving 32
   concurrent rollouts, against one batched `model.generate` of the same 32
   prompts (greedy, so both produce the same tokens). Target ratio >= 0.8.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import time

import httpx

from astuner import Task, WorkflowOutput
from astuner.core.tokenizer import load_tokenizer
from astuner.default_plugins.arith_reader import ArithReader, ArithReaderSettings
from astuner.default_plugins.exact_judge import ExactJudge, ExactJudgeSettings
from astuner.rollout.engine import SamplingParams
from astuner.rollout.gateway import Gateway
from astuner.rollout.runner import RolloutRunner, RunnerSettings
from astuner.rollout.workflow import adapt_workflow
from astuner.testing.engines import ScriptedEngine

CALLS_PER_ROLLOUT = 10
SSL = ssl.create_default_context()  # shared: building one per client costs ~30 ms


async def in_process_workflow(task: dict, model) -> WorkflowOutput:
    messages = [{"role": "user", "content": task["question"]}]
    for turn in range(CALLS_PER_ROLLOUT):
        call = await model.chat(messages)
        messages += [
            {"role": "assistant", "content": call.content},
            {"role": "user", "content": f"Go on {turn}."},
        ]
    return WorkflowOutput(reward=1.0)


async def httpx_workflow(task: dict, model) -> WorkflowOutput:
    """An agent speaking the OpenAI protocol with a lean HTTP client."""
    messages = [{"role": "user", "content": task["question"]}]
    async with httpx.AsyncClient(base_url=model.openai_base_url, verify=SSL) as http:
        for turn in range(CALLS_PER_ROLLOUT):
            reply = (await http.post("/chat/completions", json={"model": "m", "messages": messages})).json()
            messages += [
                {"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
                {"role": "user", "content": f"Go on {turn}."},
            ]
    return WorkflowOutput(reward=1.0)


async def openai_sdk_workflow(task: dict, model) -> WorkflowOutput:
    """The same agent with the `openai` SDK (whose request building dominates its cost)."""
    client = model.openai_client()
    messages = [{"role": "user", "content": task["question"]}]
    for turn in range(CALLS_PER_ROLLOUT):
        reply = await client.chat.completions.create(model="m", messages=messages)
        messages += [
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": f"Go on {turn}."},
        ]
    return WorkflowOutput(reward=1.0)


async def calls_per_second(workflow, rollouts: int, concurrency: int) -> float:
    tokenizer = load_tokenizer("builtin:smollm2-135m-instruct")
    engine = ScriptedEngine(tokenizer, lambda prompt: "Sure, the answer is 42.")
    async with Gateway() as gateway:
        runner = RolloutRunner(
            workflow=adapt_workflow(workflow, "bench"),
            judge=ExactJudge(ExactJudgeSettings()),
            engine=engine,
            tokenizer=tokenizer,
            settings=RunnerSettings(max_env_worker=concurrency),
            gateway=gateway,
        )
        tasks = [Task(task_id=f"b{i}", main_query=f"What is {i} + {i}?") for i in range(rollouts)]
        start = time.perf_counter()
        trajectories = await runner.run(tasks, SamplingParams(max_tokens=64), progress=False)
        elapsed = time.perf_counter() - start
    assert all(t.error is None for t in trajectories), [t.error for t in trajectories if t.error][:1]
    return engine.calls / elapsed


def engine_vs_generate(repeats: int, max_new_tokens: int) -> None:
    import torch
    from astuner_backbone_torch.engine import TransformersEngine, TransformersEngineSettings
    from astuner_backbone_torch.models import resolve_model_dir
    from transformers import AutoModelForCausalLM

    folder = resolve_model_dir("builtin:smollm2-135m-instruct")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(folder)
    questions = list(ArithReader(ArithReaderSettings(train_size=32)).read("train"))
    prompts = [
        tokenizer.encode(
            tokenizer.render([{"role": "user", "content": t.main_query}], add_generation_prompt=True)
        )
        for t in questions
    ]
    engine = TransformersEngine(model, TransformersEngineSettings())
    greedy = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)

    async def one_rollout(task: dict, model) -> WorkflowOutput:
        await model.chat([{"role": "user", "content": task["question"]}])
        return WorkflowOutput(reward=0.0)

    async def through_runner() -> tuple[int, float]:
        runner = RolloutRunner(
            workflow=adapt_workflow(one_rollout, "bench"),
            judge=ExactJudge(ExactJudgeSettings()),
            engine=engine,
            tokenizer=tokenizer,
            settings=RunnerSettings(max_env_worker=32),
        )
        start = time.perf_counter()
        trajectories = await runner.run(questions, greedy, progress=False)
        elapsed = time.perf_counter() - start
        return sum(len(t.calls[0].response_ids) for t in trajectories), elapsed

    def batched_generate() -> tuple[int, float]:
        width = max(map(len, prompts))
        pad = engine.pad_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
                eos_token_id=list(engine.eos_ids),
            )
        elapsed = time.perf_counter() - start
        generated = 0
        for row in out[:, width:].tolist():
            for i, token in enumerate(row):
                if token in engine.eos_ids:
                    generated += i + 1
                    break
            else:
                generated += len(row)
        return generated, elapsed

    ours, theirs = [], []
    for _ in range(repeats):  # alternate A/B so drift in machine load hits both
        batches_before = engine.batches_run
        tokens, seconds = asyncio.run(through_runner())
        ours.append(tokens / seconds)
        batches = engine.batches_run - batches_before
        print(f"  engine: {tokens} tokens in {seconds:.1f} s, {batches} generate batch(es)")
        tokens, seconds = batched_generate()
        theirs.append(tokens / seconds)
        print(f"  batched generate: {tokens} tokens in {seconds:.1f} s")
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"transformers engine, 32 concurrent rollouts: {a:8.1f} generated tokens/s (median of {repeats})")
    print(f"one batched model.generate, same 32 prompts: {b:8.1f} generated tokens/s")
    print(f"ratio engine / batched generate:             {a / b:8.2f}   (target >= 0.80)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--skip-model", action="store_true", help="skip the SmolLM2 engine comparison")
    args = parser.parse_args()

    paths = (
        ("in-process", in_process_workflow, "target >= 1000"),
        ("HTTP, httpx", httpx_workflow, "target >= 300"),
        ("HTTP, openai SDK", openai_sdk_workflow, "client-bound, for reference"),
    )
    for name, workflow, target in paths:
        rates = [
            asyncio.run(calls_per_second(workflow, args.rollouts, args.concurrency))
            for _ in range(args.repeats)
        ]
        print(
            f"{name:>16}: {statistics.median(rates):8.0f} LLM calls/s "
            f"({args.rollouts} rollouts x {CALLS_PER_ROLLOUT} calls, {args.concurrency} at once; {target})"
        )
    if not args.skip_model:
        engine_vs_generate(args.repeats, args.max_new_tokens)


if __name__ == "__main__":
    main()
