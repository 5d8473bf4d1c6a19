import asyncio
import os
import shlex
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from astuner_engine_vllm import VllmEngine, VllmEngineSettings
from vllm_stub import END, make_app

from astuner.api import EngineModel
from astuner.errors import AstunerError
from astuner.rollout.engine import SamplingParams
from astuner.serving import ThreadedServer


def test_prompts_go_as_token_ids_and_come_back_with_logprobs() -> None:
    seen: list[dict] = []
    with ThreadedServer(make_app(seen)) as server:
        model = EngineModel(path="served-model", url=server.url + "/v1")
        engine = VllmEngine(VllmEngineSettings(), model)

        async def go():
            try:
                return await asyncio.gather(
                    engine.generate([11, 12, 13, 14], SamplingParams(temperature=0.5, max_tokens=10)),
                    engine.generate([7, 8], SamplingParams(max_tokens=2, stop_token_ids=(99,))),
                )
            finally:
                await engine.aclose()

        full, cut = asyncio.run(go())
    assert full.token_ids == [14, 13, 12, END] and full.finish_reason == "stop"
    assert full.logprobs == [-0.5] * 4
    assert cut.finish_reason == "length" and cut.token_ids == [8, 7]
    body = next(b for b in seen if b["prompt"] == [11, 12, 13, 14])
    assert body["return_token_ids"] is True and body["logprobs"] == 1
    assert body["temperature"] == 0.5 and body["model"] == "served-model"
    assert any(b["stop_token_ids"] == [99] for b in seen)


@pytest.mark.parametrize(
    ("served", "cause"),
    [("none", "returned no log-probs"), ("short", "returned 3 log-probs for 4 sampled tokens")],
)
def test_missing_logprobs_are_an_error_not_zeros(served: str, cause: str) -> None:
    """Made-up log-probs would give the trainer wrong ratios: a reply without them is an error."""
    with ThreadedServer(make_app(logprobs=served)) as server:
        model = EngineModel(path="served-model", url=server.url + "/v1")
        engine = VllmEngine(VllmEngineSettings(), model)

        async def go():
            try:
                return await engine.generate([11, 12, 13, 14], SamplingParams(max_tokens=10))
            finally:
                await engine.aclose()

        with pytest.raises(AstunerError) as error:
            asyncio.run(go())
    message = str(error.value)
    assert f"vLLM server at {server.url}" in message and cause in message
    assert "not filled in" in message and "rollout.engine_url" in message


def test_starts_a_server_when_no_url_and_stops_it_by_pid(tmp_path: Path) -> None:
    stub = Path(__file__).with_name("vllm_stub.py")
    settings = VllmEngineSettings(serve_command=shlex.join([sys.executable, str(stub)]), startup_timeout=60)
    engine = VllmEngine(settings, EngineModel(path="base-model"))
    assert engine.server is not None
    process = engine.server.process
    assert engine.url.startswith("http://127.0.0.1:")

    async def go():
        try:
            return await engine.generate([1, 2, 3], SamplingParams(max_tokens=8))
        finally:
            await engine.aclose()

    assert asyncio.run(go()).token_ids == [3, 2, 1, END]
    assert process.poll() is not None


def test_a_server_whose_socket_closes_before_it_exits_is_reported_as_exited() -> None:
    """A failed call gives the server a moment to finish exiting, then names its exit code."""
    stub = Path(__file__).with_name("vllm_stub.py")
    settings = VllmEngineSettings(serve_command=shlex.join([sys.executable, str(stub)]), startup_timeout=60)
    engine = VllmEngine(settings, EngineModel(path="base-model"))
    assert engine.server is not None
    port = int(engine.url.rsplit(":", 1)[1])

    async def go() -> AstunerError:
        await engine.generate([1, 2, 3], SamplingParams(max_tokens=8))
        os.kill(engine.server.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the socket is closed, the process still there
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                break
            await asyncio.sleep(0.05)
        assert engine.server.alive()
        try:
            with pytest.raises(AstunerError) as error:
                await engine.generate([1, 2, 3], SamplingParams(max_tokens=8))
        finally:
            await engine.aclose()
        return error.value

    message = str(asyncio.run(go()))
    assert "exited with code 9 during the run" in message and "Last lines of its log" in message


def test_a_server_that_dies_at_start_is_reported() -> None:
    settings = VllmEngineSettings(serve_command=shlex.join([sys.executable, "-c", "raise SystemExit(3)"]))
    with pytest.raises(AstunerError, match="exited with code 3 before it was ready"):
        VllmEngine(settings, EngineModel(path="base-model"))


def test_a_trainer_gets_its_folder_served_and_its_log_where_it_asks(tmp_path: Path) -> None:
    """`start_folder` and `default_log` apply to a server the engine starts, never to an attached one."""
    stub = Path(__file__).with_name("vllm_stub.py")
    settings = VllmEngineSettings(serve_command=shlex.join([sys.executable, str(stub)]), startup_timeout=60)
    written: list[str] = []

    def start_folder() -> str:
        (tmp_path / "weights-v0").mkdir()
        written.append(str(tmp_path / "weights-v0"))
        return written[-1]

    log = tmp_path / "run" / "vllm.log"
    engine = VllmEngine(
        settings, EngineModel(path="base-model"), start_folder=start_folder, default_log=log, model_dir="base"
    )
    try:
        assert engine.server is not None and not engine.attached
        assert engine.served_name == engine.model == written[0]
        assert engine.server.log_file == log and log.is_file()
    finally:
        asyncio.run(engine.aclose())
    with ThreadedServer(make_app()) as server:
        model = EngineModel(path="base-model", url=server.url)
        attached = VllmEngine(VllmEngineSettings(), model, start_folder=start_folder, model_dir="base")
        asyncio.run(attached.aclose())
    assert attached.attached and attached.server is None
    assert attached.served_name == "base" and len(written) == 1
