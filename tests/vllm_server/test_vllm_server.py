"""The `vllm` engine against a real SmolLM2 server that its tests share: what the trainer sees.

How servers fail is in test_vllm_server_failures.py (each of those starts a server of its own).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")
from astuner_engine_vllm import VllmEngine
from servers import attach

from astuner.config import load_config
from astuner.core.tokenizer import load_tokenizer
from astuner.core.tracker import ContextTracker
from astuner.rollout.engine import Generation, SamplingParams
from astuner.rollout.stack import runner_settings_from_config

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = ["What is 7 + 5?", "Name a colour.", "What is the capital of France?", "Count to five."]


def run(engine: VllmEngine, *calls):
    """Run coroutines made by `calls(engine)` together on one loop, then close the engine."""

    async def go():
        try:
            return await asyncio.gather(*(call(engine) for call in calls))
        finally:
            await engine.aclose()

    return asyncio.run(go())


def prompt_ids(model_dir: str, question: str) -> list[int]:
    tokenizer = load_tokenizer(model_dir)
    return tokenizer.encode(
        tokenizer.render([{"role": "user", "content": question}], add_generation_prompt=True)
    )


def test_sampled_tokens_and_logprobs_are_what_the_trainer_computes(smollm2_server, smollm2_dir) -> None:
    from transformers import AutoModelForCausalLM

    temperature = 0.7
    prompts = [prompt_ids(smollm2_dir, q) for q in QUESTIONS]
    sampling = SamplingParams(temperature=temperature, max_tokens=48, seed=7)
    engine = attach(smollm2_server.url, smollm2_server.served_name)
    replies: list[Generation] = run(engine, *(lambda e, p=p: e.generate(p, sampling) for p in prompts))
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    gaps = []
    for prompt, reply in zip(prompts, replies, strict=True):
        assert reply.token_ids and len(reply.logprobs) == len(reply.token_ids)
        if reply.finish_reason == "stop":  # the end-of-turn token is part of the response, as trained
            assert reply.token_ids[-1] == 2
        ids = torch.tensor([prompt + reply.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
        trainer = torch.log_softmax(logits, -1).gather(1, torch.tensor(reply.token_ids)[:, None])[:, 0]
        gaps.append((trainer - torch.tensor(reply.logprobs)).abs())
    gap = torch.cat(gaps)
    print(
        f"|engine - trainer| log-prob over {gap.numel()} tokens: max {gap.max():.2e}, mean {gap.mean():.2e}"
    )
    assert float(gap.mean()) < 0.01 and float(gap.max()) < 0.1


def test_32_concurrent_rollouts_each_get_their_own_tokens(smollm2_server, smollm2_dir) -> None:
    prompts = [prompt_ids(smollm2_dir, f"Write a word that rhymes with {w}.") for w in range(32)]
    sampling = SamplingParams(temperature=1.0, max_tokens=24)
    engine = attach(smollm2_server.url, smollm2_server.served_name)
    began = time.perf_counter()
    replies = run(engine, *(lambda e, p=p: e.generate(p, sampling) for p in prompts))
    took = time.perf_counter() - began
    tokens = sum(len(r.token_ids) for r in replies)
    print(f"32 concurrent rollouts: {tokens} tokens in {took:.1f} s ({tokens / took:.0f} tok/s)")
    assert len(replies) == 32
    assert all(0 < len(r.token_ids) <= 24 and len(r.logprobs) == len(r.token_ids) for r in replies)
    assert len({tuple(r.token_ids) for r in replies}) > 16  # sampled, not one reply copied


def test_stop_tokens_and_max_tokens(smollm2_server, smollm2_dir) -> None:
    prompt = prompt_ids(smollm2_dir, "Describe the sea in two sentences.")
    greedy = SamplingParams(temperature=0.0, max_tokens=20)
    engine = attach(smollm2_server.url, smollm2_server.served_name)
    (free,) = run(engine, lambda e: e.generate(prompt, greedy))
    assert free.finish_reason == "length" and len(free.token_ids) == 20
    stop_at = free.token_ids[6]
    engine = attach(smollm2_server.url, smollm2_server.served_name)
    stopped, short = run(
        engine,
        lambda e: e.generate(
            prompt, SamplingParams(temperature=0.0, max_tokens=20, stop_token_ids=(stop_at,))
        ),
        lambda e: e.generate(prompt, SamplingParams(temperature=0.0, max_tokens=3)),
    )
    first = free.token_ids.index(stop_at)
    assert stopped.finish_reason == "stop" and stopped.token_ids == free.token_ids[: first + 1]
    assert short.finish_reason == "length" and short.token_ids == free.token_ids[:3]


def test_tool_calls_come_back_through_astuners_parser(smollm2_server) -> None:
    """The math agent's prompt (its tools and demonstration) on vLLM: the replies parse into calls."""
    config = load_config(REPO / "examples" / "math_agent" / "math_agent_arith.yaml", environ={})
    settings = runner_settings_from_config(config).tracker
    tokenizer = load_tokenizer(smollm2_server.model)
    tool = {
        "type": "function",
        "function": {
            "name": "execute_python_code",
            "description": "Run Python code and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "The code to run."}},
                "required": ["code"],
            },
        },
    }
    problems = ["Ana has 12 apples. Then Ana buys 30 more. How many apples does Ana have now?"] + [
        f"Tom has {a} cards. Then Tom finds {b} more. How many cards does Tom have now?"
        for a, b in [(14, 27), (33, 19), (8, 45), (21, 21), (50, 13)]
    ]
    engine = attach(smollm2_server.url, smollm2_server.served_name)

    async def ask(e: VllmEngine, problem: str):
        tracker = ContextTracker(tokenizer, settings)

        async def generate(ids: list[int], budget: int) -> Generation:
            return await e.generate(ids, SamplingParams(temperature=0.0, max_tokens=min(budget, 80)))

        return await tracker.call([{"role": "user", "content": problem}], [tool], "agent", generate)

    calls = run(engine, *(lambda e, p=p: ask(e, p) for p in problems))
    parsed = [tc for call in calls for tc in call.tool_calls]
    print(f"{len(parsed)} tool calls parsed from {len(calls)} replies")
    assert parsed, [c.text for c in calls]
    assert all(tc.name == "execute_python_code" and "print" in tc.arguments for tc in parsed)
