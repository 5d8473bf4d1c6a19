"""Per-agent LoRA adapters on one frozen base model (`agents.<name>.lora`).

A multi-agent workflow may give each agent an adapter of its own: one
shared base model in float32, wrapped by peft with one adapter per agent,
each named after its agent. Adapters that train this run (the
`AgentPlan`'s `trained_adapters`) start new from their settings, or from
their `path`; fixed adapters load frozen from their folder (under training,
and in the engine `transformers` when it loads its own model: `astuner eval`,
backbone debug). A folder without an adapter is an error naming its
`agents.<name>.lora.path`. A checkpoint holds the trained ones only (the
fixed ones are where the config says):

    <checkpoint>/adapters/<agent>/adapter_config.json
    <checkpoint>/adapters/<agent>/adapter_model.safetensors

each loadable alone with `peft.PeftModel.from_pretrained(base, folder)`.

peft's `set_adapter` and `disable_adapter` also switch `requires_grad`
(the active adapter on, every other one off); `using_adapter` puts the
flags back afterwards, so which parameters train never depends on which
adapter generated or trained last.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from astuner.api import AstunerError, ConfigError
from astuner.training import AgentPlan

# The checkpoint's folder of trained adapters, one subfolder per agent.
ADAPTERS_DIR = "adapters"
# What makes a folder a saved adapter (peft writes it beside the weights).
ADAPTER_CONFIG = "adapter_config.json"


class LoraSettings(Protocol):
    """`model.lora` or `agents.<name>.lora`: what a new adapter is made of."""

    rank: int
    alpha: float
    dropout: float
    target_modules: str | list[str]


@contextlib.contextmanager
def naming(folder: str | Path) -> Iterator[None]:
    """Errors while reading weights name the folder they came from (a corrupt file says only 'header')."""
    try:
        yield
    except (AstunerError, ImportError):
        raise
    except Exception as exc:
        raise AstunerError(
            f"Cannot load the model weights in '{folder}': {type(exc).__name__}: {exc}. If it is a "
            "checkpoint, its files may be truncated or corrupt: resume from an earlier checkpoint."
        ) from exc


def peft_config(lora: LoraSettings) -> Any:
    """peft's `LoraConfig` for a new adapter; a ConfigError when peft is not installed."""
    try:
        from peft import LoraConfig
    except ImportError as exc:
        raise ConfigError(
            "LoRA is configured (model.lora.rank or agents.<name>.lora) but peft is not installed: "
            "pip install peft (or remove the LoRA settings to train all weights)."
        ) from exc
    return LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


def with_agent_adapters(model: Any, plan: AgentPlan, resume: Path | None) -> Any:
    """`model`, frozen, wrapped with one adapter per agent of `plan` (named after it).

    A trained adapter comes from the checkpoint `resume` when resuming, else
    from its `path`, else new; only the trained adapters' weights train.
    """
    sources: dict[str, tuple[Any, bool]] = {}
    for name, lora in plan.trained_adapters.items():
        if resume is not None:
            source: Any = resume / ADAPTERS_DIR / name
        elif lora.path is not None:
            source = adapter_folder(name, lora.path)
        else:
            source = peft_config(lora)
        sources[name] = (source, True)
    for name, folder in plan.fixed_adapters.items():
        sources[name] = (adapter_folder(name, folder), False)
    wrapped = model
    for name, (source, trainable) in sorted(sources.items()):
        wrapped = _attach(wrapped, name, source, trainable)
    wrapped.requires_grad_(False)
    for name in plan.trained_adapters:
        for parameter in adapter_parameters(wrapped, name):
            parameter.requires_grad_(True)
    return wrapped


def adapter_folder(agent: str, folder: str | Path) -> Path:
    """`folder` (`agents.<agent>.lora.path`) when it holds a saved adapter; else an AstunerError naming
    the key and the folder (peft's own says only that some file is missing)."""
    path = Path(folder)
    if (path / ADAPTER_CONFIG).is_file():
        return path
    what = "does not exist" if not path.exists() else f"holds no {ADAPTER_CONFIG}"
    raise AstunerError(
        f"agents.{agent}.lora.path: '{folder}' {what}. It must be a saved LoRA adapter's folder "
        f"({ADAPTER_CONFIG} and adapter_model.safetensors), such as <checkpoint>/{ADAPTERS_DIR}/{agent} "
        "of a run with per-agent adapters."
    )


def _attach(model: Any, name: str, source: Any, trainable: bool) -> Any:
    """`model` (a plain model, or a PeftModel already holding adapters) with adapter `name` added:
    new from a `LoraConfig`, or read from a folder."""
    from peft import LoraConfig, PeftModel, get_peft_model

    first = not isinstance(model, PeftModel)
    if isinstance(source, LoraConfig):
        if first:
            return get_peft_model(model, source, adapter_name=name)
        model.add_adapter(name, source)
        return model
    with naming(source):
        if first:
            return PeftModel.from_pretrained(model, str(source), adapter_name=name, is_trainable=trainable)
        model.load_adapter(str(source), adapter_name=name, is_trainable=trainable)
    return model


def adapter_parameters(model: Any, name: str) -> list[torch.nn.Parameter]:
    """The weights of adapter `name` in every adapted layer of `model` (a PeftModel)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    found: list[torch.nn.Parameter] = []
    for module in model.modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        for layer_name in module.adapter_layer_names:
            holder = getattr(module, layer_name)
            if name not in holder:
                continue
            part = holder[name]
            found.extend([part] if isinstance(part, torch.nn.Parameter) else part.parameters())
    return found


@contextlib.contextmanager
def using_adapter(model: Any, name: str | None) -> Iterator[None]:
    """Run `model` (a PeftModel) with adapter `name` active, or with its adapters off when None; the
    active adapter and every parameter's `requires_grad` are as before afterwards."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    previous = model.active_adapter
    try:
        if name is None:
            with model.disable_adapter():
                yield
        else:
            model.set_adapter(name)
            yield
    finally:
        if name is not None:
            model.set_adapter(previous)
        for parameter, flag in flags:
            parameter.requires_grad_(flag)


def save_adapters(model: Any, folder: Path, names: Sequence[str]) -> None:
    """Adapters `names` of `model` into `folder/adapters/<name>/` (the layout of the module docstring)."""
    root = folder / ADAPTERS_DIR
    for name in names:
        # peft writes an adapter into a subfolder of its name, except one named "default" (at the root).
        model.save_pretrained(str(root / name if name == "default" else root), selected_adapters=[name])


def check_resumed_adapters(checkpoint: Path, trained: Sequence[str]) -> None:
    """A ConfigError naming the difference when `checkpoint` holds other trained adapters than `trained`."""
    root = checkpoint / ADAPTERS_DIR
    saved = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    if saved == set(trained):
        return
    missing, extra = sorted(set(trained) - saved), sorted(saved - set(trained))
    parts = [f"this run trains {missing} whose adapters it does not hold"] if missing else []
    parts += [f"it holds adapters of {extra}, which this run does not train"] if extra else []
    raise ConfigError(
        f"trainer_common.resume: checkpoint '{checkpoint}' was trained with other per-agent adapters "
        f"({'; '.join(parts)}). Resume with the same agents.<name>.lora and rollout.trainable_targets, "
        "or start fresh (trainer_common.resume: disable)."
    )
