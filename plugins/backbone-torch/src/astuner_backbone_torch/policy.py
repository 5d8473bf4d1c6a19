"""The models of one training run: the policy, its rollout copy, and the KL reference.

- The **policy** holds float32 master weights (optionally wrapped with LoRA
  adapters by peft); forward/backward run under autocast in `train_dtype`
  (bfloat16 on GPUs that have it; on CPUs where `dtype_probe` measured it
  faster for this model).
- The **rollout copy** is what the engine generates with: a bfloat16 copy
  where bfloat16 decodes faster (GPUs; CPUs where `dtype_probe` measured
  it), synced from the policy after every update; or the policy itself
  when both dtypes are float32, unless rollouts run while the policy
  trains (`trainer_common.max_staleness` > 0: generation must read weights
  the update does not touch, so there is always a copy; a float32 copy shares
  the frozen weights, so with adapters it holds only its own adapters). With
  rollouts on a vLLM server there is no copy: the server holds it.
- The **reference** (only when a KL loss is used) is the initial model:
  a frozen copy, or, with LoRA, the policy with its adapters switched off.

With per-agent adapters (`agents.<name>.lora`, see `adapters`) the policy is
the frozen base holding one adapter per agent; only the trained adapters'
weights train, and the reference is the base with every adapter off.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from astuner.training import AgentPlan
from astuner_backbone_torch.adapters import (
    LoraSettings,
    adapter_parameters,
    check_resumed_adapters,
    naming,
    peft_config,
    save_adapters,
    using_adapter,
    with_agent_adapters,
)
from astuner_backbone_torch.dtype_probe import fastest_cpu_dtype, fastest_cpu_train_dtype
from astuner_backbone_torch.models import resolve_model_dir
from astuner_backbone_torch.settings import DType, TorchSettings


class ModelSettings(Protocol):
    """`model:`: the base model trained, and its one shared LoRA adapter (rank 0: none)."""

    @property
    def path(self) -> str: ...

    @property
    def lora(self) -> LoraSettings: ...


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def native_bf16(device: torch.device) -> bool:
    """Whether bfloat16 beats float32 here: GPUs that support it, CPUs with AMX tiles.

    AVX512-BF16 alone is not enough: on such a 2-core Xeon, SmolLM2's bench
    update took 25 s under bf16 autocast against 16 s in float32, and
    decoding was no faster from a bf16 copy (15.2 s against 14.5 s).
    """
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(torch.cpu._is_amx_tile_supported())
    return False


def generation_dtype(name: DType, device: torch.device, model: Any) -> torch.dtype:
    """The rollout copy's dtype: as set, else bfloat16 on a GPU that has it, else on a CPU whichever
    decodes `model` faster there (`dtype_probe`, measured once per machine)."""
    return _chosen_dtype(name, device, model, fastest_cpu_dtype)


def training_dtype(name: DType, device: torch.device, model: Any) -> torch.dtype:
    """The update's autocast dtype: as set, else bfloat16 on a GPU that has it, else on a CPU whichever
    runs `model`'s forward and backward faster there (`dtype_probe`, measured once per machine)."""
    return _chosen_dtype(name, device, model, fastest_cpu_train_dtype)


def _chosen_dtype(
    name: DType, device: torch.device, model: Any, probe: Callable[[Any], torch.dtype]
) -> torch.dtype:
    if name != "auto":
        return getattr(torch, name)
    if device.type == "cpu":
        return probe(model)
    return torch.bfloat16 if native_bf16(device) else torch.float32


@dataclass
class Policy:
    """The trained model and its companions; see the module docstring.

    `lora`: only adapter weights train (`model.lora`, or per-agent adapters);
    `trained`: the per-agent adapters that train, `adapters`: every per-agent
    adapter the model holds (both empty without per-agent adapters).
    """

    model: Any
    generator: Any
    reference: Any | None
    tokenizer: Any
    device: torch.device
    train_dtype: torch.dtype
    lora: bool
    trained: tuple[str, ...] = ()
    adapters: frozenset[str] = frozenset()

    @classmethod
    def load(
        cls,
        model_settings: ModelSettings,
        settings: TorchSettings,
        *,
        plan: AgentPlan,
        need_reference: bool,
        weights: Path | None = None,
        need_generator: bool = True,
        own_generator: bool = False,
    ) -> Policy:
        """Build the models from `model.path`, or from a checkpoint folder `weights` when resuming.

        `plan`: the run's agents and their adapters (`agent_plan`; `AgentPlan()` for none).
        `need_generator=False` (rollouts on a server) makes no rollout copy: `generator` is the policy.
        `own_generator`: a rollout copy even where its dtype is the policy's (asynchronous rollouts
        generate while the policy's weights change).
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if weights is not None:
            check_resumed_adapters(weights, tuple(plan.trained_adapters))
        device = pick_device(settings.device)
        base_dir = resolve_model_dir(model_settings.path)
        lora = model_settings.lora.rank > 0 or bool(plan.adapters)
        source = base_dir if (weights is None or lora) else str(weights)
        with naming(source):
            model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        gen_dtype = generation_dtype(settings.gen_dtype, device, model) if need_generator else torch.float32
        train_dtype = training_dtype(settings.train_dtype, device, model)
        if plan.adapters:
            model = with_agent_adapters(model, plan, weights)
        elif lora:
            with naming(weights or base_dir):
                model = _with_lora(model, model_settings.lora, weights)
        model.to(device)
        if settings.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        copies = need_generator and (gen_dtype != torch.float32 or own_generator)
        generator = rollout_copy(model, gen_dtype) if copies else model
        generator.eval()
        reference = None
        if need_reference and not lora:
            # float32 under the same autocast as the policy: identical numerics at step 0 (KL exactly 0).
            reference = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).to(device).eval()
            reference.requires_grad_(False)
        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        trained = tuple(sorted(plan.trained_adapters))
        return cls(model, generator, reference, tokenizer, device, train_dtype, lora, trained, plan.adapters)

    @property
    def separate_generator(self) -> bool:
        return self.generator is not self.model

    def trainable_parameters(self, adapter: str | None = None) -> list[torch.nn.Parameter]:
        """The weights that train: per-agent `adapter`'s, or all (every trained adapter's, with them)."""
        if adapter is not None:
            return adapter_parameters(self.model, adapter)
        if self.trained:
            return [p for name in self.trained for p in adapter_parameters(self.model, name)]
        return [p for p in self.model.parameters() if p.requires_grad]

    def training_adapter(self, name: str) -> contextlib.AbstractContextManager[None]:
        """The policy runs with per-agent adapter `name` (forward and backward of its update)."""
        return using_adapter(self.model, name)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast to `train_dtype` (a no-op for float32)."""
        enabled = self.train_dtype != torch.float32
        return torch.autocast(self.device.type, dtype=self.train_dtype, enabled=enabled)

    @contextlib.contextmanager
    def reference_model(self) -> Iterator[Any]:
        """The frozen initial model to compute reference log-probs with."""
        if self.lora:
            with using_adapter(self.model, None):
                yield self.model
        elif self.reference is None:
            raise RuntimeError("no reference model: the policy was loaded without need_reference")
        else:
            yield self.reference

    @torch.no_grad()
    def sync_generator(self) -> None:
        """Copy the updated weights into the rollout copy (only those that train: every trained
        adapter's, whichever is active)."""
        if not self.separate_generator:
            return
        if self.trained:
            for name in self.trained:
                sources = adapter_parameters(self.model, name)
                for target, source in zip(adapter_parameters(self.generator, name), sources, strict=True):
                    target.copy_(source)
            return
        for target, source in zip(self.generator.parameters(), self.model.parameters(), strict=True):
            if source.requires_grad:
                target.copy_(source)

    def save(self, folder: Path) -> None:
        """The weights (or the LoRA adapter, or each trained per-agent adapter: `adapters`) and the
        tokenizer, in HuggingFace format."""
        if self.trained:
            save_adapters(self.model, folder, self.trained)
        else:
            self.model.save_pretrained(str(folder))
        self.tokenizer.save_pretrained(str(folder))


def rollout_copy(model: Any, dtype: torch.dtype) -> Any:
    """A copy of `model` in `dtype` to generate with. In the policy's own dtype (float32: an own copy
    for asynchronous rollouts) the frozen parameters are shared, not copied: with LoRA or per-agent
    adapters only the adapters train, so the copy costs their size instead of the base model's. A copy
    in another dtype shares nothing (converting a shared parameter would convert the policy's)."""
    if dtype != torch.float32:
        return copy.deepcopy(model).to(dtype)
    frozen = {id(p): p for p in model.parameters() if not p.requires_grad}
    return copy.deepcopy(model, memo=frozen)


def _with_lora(model: Any, settings: LoraSettings, weights: Path | None) -> Any:
    """`model` with the one adapter of `model.lora`: new, or the checkpoint's `weights` when resuming."""
    lora = peft_config(settings)  # first: a ConfigError when peft is missing
    from peft import PeftModel, get_peft_model

    if weights is not None:
        return PeftModel.from_pretrained(model, str(weights), is_trainable=True)
    return get_peft_model(model, lora)
