"""The `vllm` engine against real vLLM servers: what the trainer sees, and how a server fails."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")
from astuner_engine_vllm import VllmEngine
from servers import EAGER, attach, start_engine

from astuner.config import load_config
from astuner.core.tokenizer import load_tokenizer
from astuner.core.tracker import ContextTracker
from astuner.errors import AstunerError
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


# --------------------------------------------------------------- failures


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_server_that_dies_mid_run_fails_its_calls_clearly(
    vllm_tiny_model_dir, server_env, tmp_path
) -> None:
    engine = start_engine(vllm_tiny_model_dir, tmp_path / "vllm.log", server_env, serve_args=EAGER)
    assert engine.server is not None
    pid = engine.server.pid
    prompt = list(range(100, 140))

    async def go():
        first = await engine.generate(prompt, SamplingParams(max_tokens=4))
        os.kill(pid, signal.SIGKILL)
        results = await asyncio.gather(
            *(engine.generate(prompt, SamplingParams(max_tokens=64)) for _ in range(4)),
            return_exceptions=True,
        )
        try:
            await engine.check_alive()
        except AstunerError as exc:
            alive_error = exc
        await engine.aclose()
        return first, results, alive_error

    first, results, alive_error = asyncio.run(go())
    assert len(first.token_ids) == 4
    for result in results:
        assert isinstance(result, AstunerError)
        assert f"(pid {pid}) exited with code -9 during the run" in str(result)
        assert "Last lines of its log" in str(result)
    assert "exited with code -9" in str(alive_error)
    deadline = time.monotonic() + 30
    while not group_gone(pid) and time.monotonic() < deadline:  # its engine core went with it
        time.sleep(0.5)
    assert group_gone(pid)


def test_a_server_that_is_not_ready_in_time_is_stopped_and_its_log_shown(
    vllm_tiny_model_dir, server_env, tmp_path
) -> None:
    # Not EAGER: compiling keeps the server far from ready at 30 s, while importing vLLM (11-12 s on
    # a busy 2-core machine) has put its first lines in the log by then.
    began = time.monotonic()
    with pytest.raises(AstunerError) as error:
        start_engine(vllm_tiny_model_dir, tmp_path / "vllm.log", server_env, startup_timeout=30)
    message = str(error.value)
    assert "not ready within 30 s (rollout.engines.vllm.startup_timeout)" in message
    assert "vllm.entrypoints.openai.api_server" in message and str(tmp_path / "vllm.log") in message
    tail = message.split("Last lines of its log", 1)[1]
    # vLLM's own words, not an empty tail: its INFO lines, or (stopped mid-start) its workers' traceback.
    assert "(empty log)" not in tail and "vllm" in tail.lower()
    assert time.monotonic() - began < 30 + 60  # stopped within a minute of giving up


def test_a_port_in_use_and_a_missing_model_folder_are_named(
    vllm_tiny_model_dir, server_env, tmp_path
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(AstunerError, match=f"Port {port} on 127.0.0.1 is already in use"):
            start_engine(vllm_tiny_model_dir, tmp_path / "vllm.log", server_env, port=port)
    with pytest.raises(AstunerError, match=r"model\.path: '/no/such/model' is not a folder"):
        start_engine("/no/such/model", tmp_path / "vllm.log", server_env)
