"""How a real vLLM server's failures reach the caller: a server that dies, one that is never ready, a
busy port and a missing model folder (each starts, or fails to start, a server of its own)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time

import pytest

pytest.importorskip("vllm")
from servers import EAGER, start_engine

from astuner.errors import AstunerError
from astuner.rollout.engine import SamplingParams


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
