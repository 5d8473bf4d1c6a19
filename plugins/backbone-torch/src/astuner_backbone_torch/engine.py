"""Engine `transformers`: the policy generates in-process, batched across rollouts.

Many rollouts run at once, each awaiting one model call. Their requests
queue up; a single worker takes every waiting request with the same
sampling settings and decodes them as one batch (`decoding.RunningBatch`: KV cache)
in a worker thread, so the event loop keeps serving the other rollouts
meanwhile. A request is answered as soon as its row finishes, and requests
with the same settings that arrive meanwhile join the running batch
(continuous batching): an agent's next turn does not wait for the longest
reply of the previous round. Each request gets back its own tokens, the
log-prob of each sampled token, and why it stopped.

Prompts that continue what the engine already ran (an agent's next turn, a
GRPO group's repeated prompt) start from the stored keys and values of it
(`prefix_cache`); the store is emptied whenever the weights change.

A model holding per-agent LoRA adapters (`agents.<name>.lora`: the policy's
under training, the fixed ones of `EngineModel.adapters` when the engine
loads its own model) serves them (`adapter_names`): a request's `sampling.adapter` picks the adapter its
batch generates with (a batch has one adapter; None: the base model with
every adapter off), and each adapter has its own store of keys and values,
as they differ between adapters.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from astuner.api import AstunerError, Generation, SamplingParams
from astuner.training import AgentPlan
from astuner_backbone_torch.adapters import using_adapter, with_agent_adapters
from astuner_backbone_torch.decoding import DecodedRow, RunningBatch, Sampler
from astuner_backbone_torch.packed_decoder import packed_decoder
from astuner_backbone_torch.prefix_cache import PrefixStore
from astuner_backbone_torch.settings import TransformersEngineSettings
from astuner_backbone_torch.threads import use_threads

if TYPE_CHECKING:
    from astuner.api import EngineModel


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future[Generation] = field(repr=False)

    def answer(self, row: DecodedRow, version: int | None = None) -> None:
        """Resolve the request with `row`, sampled by weights `version` (from any thread, on the
        request's own event loop)."""
        generation = Generation(row.token_ids, row.logprobs, row.finish_reason, version, self.sampling)
        self._on_loop(_resolve, generation)

    def fail(self, exc: Exception) -> None:
        self._on_loop(_fail, exc)

    def _on_loop(self, settle: Any, value: Any) -> None:
        loop = self.future.get_loop()
        if not loop.is_closed():  # a closed loop: its caller is gone and waits for nothing
            loop.call_soon_threadsafe(settle, self.future, value)

    @property
    def batch_key(self) -> tuple[Any, ...]:
        s = self.sampling
        return (s.temperature, s.top_p, s.top_k, s.seed, s.adapter)


class TransformersEngine:
    """A token engine around a HuggingFace causal LM held in this process.

    `adapters`: the per-agent adapters `model` (a PeftModel) holds and serves
    (`Policy.adapters`); empty: it generates with `model` as it is.
    """

    def __init__(
        self,
        model: Any,
        settings: TransformersEngineSettings | None = None,
        *,
        adapters: Collection[str] = (),
    ) -> None:

        self.settings = settings or TransformersEngineSettings()
        use_threads(self.settings.num_threads, "rollout.engines.transformers.num_threads")
        self.model = model
        self.device = next(model.parameters()).device
        config = model.generation_config
        eos = config.eos_token_id
        self.eos_ids: tuple[int, ...] = (
            tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        )
        pad = config.pad_token_id if config.pad_token_id is not None else model.config.pad_token_id
        self.pad_id: int = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        self._queue: list[_Request] = []
        self._queue_lock = threading.Lock()  # the event loop adds requests, the decoding thread takes them
        self._worker: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="astuner-generate")
        # Training and generation share the weights; the trainer holds this
        # lock (through `changing_weights`) so no batch sees a half-updated model.
        self.weights_lock = threading.Lock()
        # Set while a weight change waits for the lock: a running batch then admits no more requests,
        # so it ends and the change goes in (rollouts running during an update would keep it going),
        # and the next batch waits for the change (notified here) rather than race it for the lock.
        self._weights_waiting = threading.Event()
        self._weights_changed = threading.Condition()
        self.adapter_names = frozenset(adapters)
        # Decoding steps on fused, packed weight copies (CPU, Llama-shaped models, no adapters).
        self.decoder = packed_decoder(model) if self.settings.packed_decoding and not adapters else None
        # Keys and values by the adapter that computed them (None: the model without one).
        self._prefix_stores: dict[str | None, PrefixStore] = {}
        self.batches_run = 0
        self.tokenizer_path: str | None = None
        # Policy updates applied to the weights so far; a trainer sets it after each (see `weights_updated`).
        self.policy_version = 0

    @classmethod
    def serving(cls, settings: TransformersEngineSettings, served: EngineModel) -> TransformersEngine:
        """An engine loading `served.path` on its settings' device and dtype (the engine `transformers`),
        with `served.adapters` (each agent's fixed adapter, `agents.<name>.lora.path`) loaded frozen
        and served under the agent's name, so `astuner eval` and backbone debug run each agent as
        training does."""
        from transformers import AutoModelForCausalLM

        from astuner_backbone_torch.models import resolve_model_dir

        folder = resolve_model_dir(served.path)
        quiet_transformers()
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=_dtype(settings.dtype, _device(settings.device))
        )
        if served.adapters:
            model = with_agent_adapters(model, AgentPlan(fixed_adapters=dict(served.adapters)), None)
        model.to(_device(settings.device)).eval()
        engine = cls(model, settings, adapters=served.adapters.keys())
        engine.tokenizer_path = folder
        return engine

    @property
    def prefixes(self) -> PrefixStore | None:
        """The stored keys and values of calls without an adapter (None: `prefix_cache_tokens` is 0)."""
        return self._prefix_store(None)

    def _prefix_store(self, adapter: str | None) -> PrefixStore | None:
        """The stored keys and values of `adapter`'s calls, each adapter's up to `prefix_cache_tokens`."""
        tokens = self.settings.prefix_cache_tokens
        if not tokens:
            return None
        return self._prefix_stores.setdefault(adapter, PrefixStore(tokens))

    @contextlib.contextmanager
    def changing_weights(self) -> Iterator[None]:
        """Hold generation off while the weights change; stored keys and values, and the packed
        decoder's weight copies, are stale after. A batch decoding when it is asked for takes no
        new requests and finishes its rows first; the requests left queued run on the new weights."""
        self._weights_waiting.set()
        try:
            with self.weights_lock:
                try:
                    yield
                finally:
                    for store in self._prefix_stores.values():
                        store.clear()
                    if self.decoder is not None:
                        self.decoder.invalidate()
        finally:
            with self._weights_changed:
                self._weights_waiting.clear()
                self._weights_changed.notify_all()

    @property
    def weight_change_waiting(self) -> bool:
        """A weight change (`changing_weights`) waits for the running batch: it admits no new request."""
        return self._weights_waiting.is_set()

    async def weights_updated(self, version: int) -> None:
        """The trainer changed the weights in place (they are shared): later batches are `version`."""
        self.policy_version = version

    def prompt_tokens(self) -> tuple[int, int]:
        """Prompt tokens asked for and actually run so far (both 0 without a prefix store)."""
        stores = self._prefix_stores.values()
        return (sum(s.requested_tokens for s in stores), sum(s.computed_tokens for s in stores))

    def prompt_reuse_since(self, before: tuple[int, int]) -> float:
        """The share of prompt tokens since `before` (from `prompt_tokens`) that came from the store."""
        requested, computed = (now - then for now, then in zip(self.prompt_tokens(), before, strict=True))
        return 1.0 - computed / requested if requested else 0.0

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        if not prompt_ids:
            raise ValueError("generate() needs at least one prompt token")
        if sampling.adapter is not None and sampling.adapter not in self.adapter_names:
            held = ", ".join(sorted(self.adapter_names)) or "none"
            raise AstunerError(
                f"The transformers engine holds no adapter '{sampling.adapter}' (it holds: {held}). An "
                f"agent's adapter comes from agents.{sampling.adapter}.lora under backbone torch."
            )
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        with self._queue_lock:
            self._queue.append(_Request(list(prompt_ids), sampling, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue:
            await self._gather_more()
            batch = self._take(self._queue[0].batch_key, self.settings.max_batch_size)
            if batch:  # empty when every request of that key was cancelled
                await loop.run_in_executor(self._executor, self._decode_session, batch)

    async def _gather_more(self) -> None:
        """Wait while requests keep arriving, so concurrent rollouts share one batch."""
        wait = self.settings.batch_wait_ms / 1000
        if wait <= 0:
            return
        seen = -1
        while len(self._queue) != seen and len(self._queue) < self.settings.max_batch_size:
            seen = len(self._queue)
            await asyncio.sleep(wait)

    def _take(self, key: tuple[Any, ...], most: int) -> list[_Request]:
        """Remove and return up to `most` queued requests with sampling settings `key` (any thread).

        Requests whose caller is gone (future cancelled, as a stopped run's rollouts are) are dropped
        from the queue first: decoding them would only delay the exit, or the requests still wanted."""
        with self._queue_lock:
            self._queue = [r for r in self._queue if not r.future.done()]
            taken = [r for r in self._queue if r.batch_key == key][:most]
            ids = {id(r) for r in taken}
            self._queue = [r for r in self._queue if id(r) not in ids]
        return taken

    def _decode_session(self, batch: list[_Request]) -> None:
        """Decode `batch` as one `RunningBatch`, each request answered as soon as it finishes; with
        continuous batching, requests with the same settings join between steps (worker thread).
        An error fails the requests in it."""
        import torch

        sampling = batch[0].sampling
        sampler = Sampler(
            greedy=sampling.greedy,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=max(sampling.top_k, 0),
        )
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        eos = frozenset(self.eos_ids)
        admitted: list[_Request] = []
        # A lock is not first come, first served: a batch that took it as soon as the one before let go
        # would run on the old weights, and batch after batch could keep an update out past its bound.
        with self._weights_changed:
            self._weights_changed.wait_for(lambda: not self._weights_waiting.is_set())
        self.batches_run += 1
        try:
            with self.weights_lock, self._adapter(sampling.adapter):
                version = self.policy_version
                store = self._prefix_store(sampling.adapter)
                # the trainer may have changed the weights since the last batch (refreshed copies)
                decoder = self.decoder if self.decoder is not None and self.decoder.refresh() else None
                running = RunningBatch(self.model, sampler, self.pad_id, store, decoder)
                joining = batch
                while joining or running:
                    if joining:
                        admitted += joining
                        running.add(
                            [r.prompt_ids for r in joining],
                            [r.sampling.max_tokens for r in joining],
                            [eos | frozenset(r.sampling.stop_token_ids) for r in joining],
                            [functools.partial(r.answer, version=version) for r in joining],
                        )
                    running.step()
                    room = self.settings.max_batch_size - len(running)
                    joining = []
                    joins = self.settings.continuous_batching and not self._weights_waiting.is_set()
                    if joins and room > 0 and running.can_join:
                        joining = self._take(batch[0].batch_key, room)
        except Exception as exc:  # one bad batch fails its requests, not the engine
            for request in admitted:
                request.fail(exc)

    def _adapter(self, name: str | None) -> contextlib.AbstractContextManager[Any]:
        """The model generates with adapter `name` (None: the base, adapters off) when it serves
        adapters; as it is otherwise."""
        return using_adapter(self.model, name) if self.adapter_names else contextlib.nullcontext()

    async def aclose(self) -> None:
        self._executor.shutdown(wait=True)


def _device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _dtype(name: str, device: str) -> Any:
    import torch

    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, name)


def _resolve(future: asyncio.Future[Generation], generation: Generation) -> None:
    if not future.done():
        future.set_result(generation)


def _fail(future: asyncio.Future[Generation], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)


def quiet_transformers() -> None:
    """No progress bars from transformers when loading or saving weights: one per load (each
    debug look, eval, and every training step's weight sync) is noise in the run's output."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
