"""Starting and reaching test vLLM servers (imported by the tests and their conftest)."""

from __future__ import annotations

from pathlib import Path

from astuner_engine_vllm import VllmEngine, VllmEngineSettings

from astuner.config import load_config
from astuner.training import main_engine_model

SMOLLM2 = "builtin:smollm2-135m-instruct"
# torch.compile's warm-up is most of a server's start, about a minute on 2 cores. The full-weights run
# keeps it (weights reloaded into a compiled model); servers that answer other tests skip it.
EAGER = ["--enforce-eager"]
# The servers' context; the reply budget must leave room for prompts in it (the tests set their own)
CONTEXT = ["rollout.max_model_len=2048", "rollout.max_response_length_in_one_turn=512"]


def start_engine(model_dir: str | Path, log: Path, env: dict[str, str], **settings: object) -> VllmEngine:
    """A `vllm` engine that starts its own server on `model_dir` (the test stops it)."""
    config = load_config(None, CONTEXT, environ={})
    return VllmEngine(
        VllmEngineSettings(**{"log_file": str(log), "startup_timeout": 600, **settings}),
        main_engine_model(config),
        model_dir=str(model_dir),
        server_env=env,
    )


def attach(url: str, model: str) -> VllmEngine:
    """An engine on a running server (one per test: its HTTP client belongs to the test's loop)."""
    config = load_config(None, [f"rollout.engine_url={url}", *CONTEXT], environ={})
    return VllmEngine(VllmEngineSettings(model=model), main_engine_model(config))
