"""Engine `vllm`: a vLLM OpenAI-compatible server, prompted with token ids.

Prompts go to `/v1/completions` as token-id lists with `return_token_ids`
and `logprobs` requested, so nothing is re-tokenised on either side. With
no URL (`rollout.engine_url` or `rollout.engines.vllm.url`) astuner starts
`vllm serve` itself on 127.0.0.1 and stops that process when done.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from astuner.companions import stop_with_parent
from astuner.errors import AstunerError
from astuner.hookspecs import Register, hookimpl
from astuner.rollout.engine import Generation, SamplingParams

if TYPE_CHECKING:
    from astuner.config import AstunerConfig


class VllmEngineSettings(BaseModel):
    """`rollout.engines.vllm`."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, description="Server base URL; default rollout.engine_url.")
    model: str | None = Field(None, description="Served model name; default model.path.")
    api_key: str = "EMPTY"
    request_timeout: float = Field(600.0, gt=0)
    serve_command: str = Field("vllm serve", description="How to start a server when no URL is given.")
    serve_args: list[str] = Field(default_factory=list, description="Extra arguments for the server.")
    startup_timeout: float = Field(1800.0, gt=0, description="Seconds to wait for /health.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VllmServer:
    """A `vllm serve` process this run started; stopped by its PID only."""

    def __init__(self, command: list[str], url: str, log_file: Path | None) -> None:
        self.command, self.url = command, url
        self._log = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=stop_with_parent()
        )

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AstunerError(
                    f"The vLLM server exited with code {self.process.returncode} before it was "
                    f"ready (command: {shlex.join(self.command)}). See its log for why."
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise AstunerError(f"The vLLM server did not become healthy within {timeout:.0f} s.")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not subprocess.DEVNULL:
            self._log.close()


class VllmEngine:
    """A token engine backed by a vLLM server."""

    def __init__(self, settings: VllmEngineSettings, config: AstunerConfig) -> None:
        self.settings = settings
        self.model = settings.model or config.model.path
        self.server: VllmServer | None = None
        url = settings.url or config.rollout.engine_url
        if url is None:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            command = [
                *shlex.split(settings.serve_command),
                self.model,
                "--host", "127.0.0.1",
                "--port", str(port),
                "--max-model-len", str(config.rollout.max_model_len),
                "--tensor-parallel-size", str(config.rollout.tensor_model_parallel_size),
                "--seed", str(config.trainer_common.seed),
                *settings.serve_args,
            ]  # fmt: skip
            log_file = Path(os.environ["ASTUNER_VLLM_LOG"]) if "ASTUNER_VLLM_LOG" in os.environ else None
            self.server = VllmServer(command, url, log_file)
            self.server.wait_healthy(settings.startup_timeout)
        self.url = url.rstrip("/").removesuffix("/v1")
        self._client = httpx.AsyncClient(
            base_url=self.url,
            timeout=settings.request_timeout,
            headers={"Authorization": f"Bearer {settings.api_key}"},
        )

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "logprobs": 1,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "stop_token_ids": list(sampling.stop_token_ids),
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        reply = await self._client.post("/v1/completions", json=body)
        if reply.status_code != 200:
            raise AstunerError(
                f"vLLM at {self.url} answered {reply.status_code} to /v1/completions: {reply.text[:500]}"
            )
        choice = reply.json()["choices"][0]
        token_ids = choice.get("token_ids")
        if token_ids is None:
            raise AstunerError(
                f"vLLM at {self.url} returned no token ids; it must support return_token_ids "
                "(vLLM >= 0.10.2)."
            )
        logprobs = self._logprobs(choice, len(token_ids))
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return Generation(list(token_ids), logprobs, finish)

    def _logprobs(self, choice: dict[str, Any], n_tokens: int) -> list[float]:
        """One log-prob per sampled token; never made up: the trainer's ratios are computed from them."""
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if logprobs is None and n_tokens == 0:
            return []
        if logprobs is None:
            problem = "returned no log-probs for the sampled tokens"
        elif len(logprobs) != n_tokens:
            problem = f"returned {len(logprobs)} log-probs for {n_tokens} sampled tokens"
        elif any(x is None for x in logprobs):
            problem = f"returned a null log-prob for sampled token {logprobs.index(None)}"
        else:
            return [float(x) for x in logprobs]
        raise AstunerError(
            f"The vLLM server at {self.url} {problem} (requested with logprobs=1). Training needs the "
            "sampling log-prob of every token, so they are not filled in. Point rollout.engine_url "
            "(or rollout.engines.vllm.url) at a vLLM server itself, which returns them for "
            "logprobs=1, not at a proxy or another OpenAI-compatible server that drops 'logprobs'."
        )

    async def aclose(self) -> None:
        await self._client.aclose()
        if self.server is not None:
            self.server.stop()


@hookimpl
def register_engines(register: Register) -> None:
    register(
        "vllm",
        VllmEngine,
        settings=VllmEngineSettings,
        summary="vLLM OpenAI-compatible server (token ids in and out); started if no URL.",
    )
