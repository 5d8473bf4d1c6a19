"""The model folder `astuner eval --checkpoint DIR` runs: a full checkpoint as it is, LoRA merged,
per-agent adapters by agent.

The torch backbone writes `checkpoints/step_<n>/` in HuggingFace format:
either the whole model (`config.json` and weights) or, with LoRA, only the
adapter (`adapter_config.json`, whose `base_model_name_or_path` names the
base it was trained on). Every engine loads a plain model folder, so an
adapter is merged into its base once, into astuner's cache (keyed by the
adapter's path and modification time, so a re-saved step is merged again);
later evaluations of the same checkpoint reuse that folder. Merging needs
torch and peft, imported only then. With per-agent adapters
(`agents.<name>.lora`) the folder holds no model but one adapter per
trained agent, `adapters/<agent>/adapter_config.json` (`agent_adapters`):
they are evaluated on the config's `model.path`, each as its agent's
`agents.<agent>.lora.path`, which only the engine `transformers` serves.
Which folder is a run's newest checkpoint is the backbone's to say
(`FindsCheckpoints`); `latest_checkpoint` asks each backbone that wrote a
run of the experiment (`astuner.training.checkpoint_of`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection
from pathlib import Path

import yaml

from astuner.api import AstunerError, ConfigError
from astuner.training import build_once, cache_dir, checkpoint_of, load_yaml

ADAPTER_CONFIG = "adapter_config.json"
# A checkpoint's folder of per-agent adapters (the torch backbone's `adapters/<agent>/`).
AGENT_ADAPTERS = "adapters"
LATEST = "latest"
_STEP = re.compile(r"^step_(\d+)$")


def step_of(folder: Path | None) -> int | None:
    """The training step of a `step_<n>` folder, None for any other folder."""
    match = _STEP.match(folder.name) if folder is not None else None
    return int(match.group(1)) if match else None


def model_for_checkpoint(checkpoint: Path) -> str:
    """A folder every engine can load as `model.path` for this checkpoint, or a clear error."""
    if not checkpoint.is_dir():
        raise AstunerError(f"--checkpoint: {_not_a_checkpoint(checkpoint)}")
    if (checkpoint / "config.json").is_file():
        return str(checkpoint.resolve())
    if (checkpoint / ADAPTER_CONFIG).is_file():
        return str(merged_adapter(checkpoint))
    found = _step_folders(checkpoint / "checkpoints")
    hint = f" It is a run folder; its checkpoints: {', '.join(found)}." if found else ""
    raise AstunerError(
        f"--checkpoint: '{checkpoint}' holds no model: a checkpoint folder has config.json (the whole "
        f"model), {ADAPTER_CONFIG} (a LoRA adapter) or {AGENT_ADAPTERS}/<agent>/{ADAPTER_CONFIG} "
        f"(per-agent adapters).{hint}"
    )


def agent_adapters(checkpoint: Path) -> dict[str, str]:
    """The per-agent adapters of `checkpoint`, by agent: each `adapters/<agent>/` folder that holds an
    adapter (absolute paths); empty for a checkpoint of the whole model or of one shared adapter."""
    root = checkpoint / AGENT_ADAPTERS
    if not root.is_dir():
        return {}
    return {
        folder.name: str(folder.resolve())
        for folder in sorted(root.iterdir())
        if (folder / ADAPTER_CONFIG).is_file()
    }


def latest_checkpoint(
    experiment_root: Path, installed: Collection[str], backbone: Callable[[str], object]
) -> Path:
    """`--checkpoint latest`: the newest checkpoint of an experiment, found by the backbone that wrote it.

    `experiment_root` is `<experiment_dir>/<experiment>`. Each run folder's
    `config.yaml` names the backbone that ran it, and each such backbone
    that is `installed` is built (`backbone(name)`) and asked about its runs;
    of their answers, the one in the most recent run wins (folders are named
    by time). A clear error when there is none yet.
    """
    runs: dict[str, list[Path]] = {}
    for run in sorted(p for p in experiment_root.glob("*") if p.is_dir()):
        runs.setdefault(_recorded_backbone(run), []).append(run)
    found = []
    for name, folders in runs.items():
        if name not in installed:
            continue
        checkpoint = checkpoint_of(backbone(name), folders)
        if checkpoint is not None:
            run = max(folder for folder in folders if checkpoint.is_relative_to(folder))
            found.append((run.name, checkpoint))
    if not found:
        raise AstunerError(
            f"--checkpoint latest: no checkpoint under {experiment_root}/*/ yet. Train first "
            "(astuner run --conf ... --backbone torch), or pass a checkpoint folder."
        )
    return max(found)[1]


def _recorded_backbone(run: Path) -> str:
    """The backbone a run folder's `config.yaml` names ('' when it cannot be read)."""
    try:
        path = run / "config.yaml"
        block = (load_yaml(path.read_text(encoding="utf-8"), f"Config file '{path}'") or {}).get("astuner")
    except (OSError, ValueError, yaml.YAMLError, ConfigError, AttributeError):
        return ""
    return str(block.get("backbone") or "") if isinstance(block, dict) else ""


def _not_a_checkpoint(path: Path) -> str:
    what = "is a file, not a folder" if path.exists() else "does not exist"
    found = _step_folders(path.parent)
    hint = f" Checkpoints next to it: {', '.join(found)}." if found else ""
    return (
        f"'{path}' {what}. Pass a checkpoint folder written by the torch backbone, "
        f"<experiment_dir>/<experiment>/<time>/checkpoints/step_<n>.{hint}"
    )


def _step_folders(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    steps = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith("step_")]
    return [str(p) for p in sorted(steps, key=lambda p: (len(p.name), p.name))]


def merged_adapter(checkpoint: Path) -> Path:
    """The cached folder of `checkpoint`'s LoRA adapter merged into its base model."""
    base = adapter_base(checkpoint)
    stamp = max(f.stat().st_mtime_ns for f in checkpoint.iterdir() if f.is_file())
    digest = hashlib.sha256(f"{checkpoint.resolve()}:{stamp}:{base}".encode()).hexdigest()[:12]
    target = cache_dir() / "merged" / f"{checkpoint.name}-{digest}"
    return build_once(target, "config.json", lambda folder: merge_adapter(checkpoint, base, folder))


def adapter_base(checkpoint: Path) -> str:
    """The base model the adapter was trained on, as its `adapter_config.json` names it."""
    try:
        base = json.loads((checkpoint / ADAPTER_CONFIG).read_text(encoding="utf-8")).get(
            "base_model_name_or_path"
        )
    except (OSError, json.JSONDecodeError) as exc:
        raise AstunerError(f"--checkpoint: cannot read {checkpoint / ADAPTER_CONFIG}: {exc}") from exc
    if not base:
        raise AstunerError(
            f"--checkpoint: {checkpoint / ADAPTER_CONFIG} names no base model "
            "(base_model_name_or_path), so the LoRA adapter cannot be merged; set it to the model "
            "the adapter was trained on."
        )
    return str(base)


def merge_adapter(checkpoint: Path, base: str, out_dir: Path) -> None:
    """Load `base`, apply the adapter, fold it into the weights and save a plain model folder."""
    try:
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise AstunerError(
            f"--checkpoint: '{checkpoint}' is a LoRA adapter; merging it into its base model needs "
            "torch and peft: pip install astuner-backbone-torch peft."
        ) from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
    except OSError as exc:
        raise AstunerError(
            f"--checkpoint: the LoRA adapter's base model '{base}' (base_model_name_or_path in "
            f"{checkpoint / ADAPTER_CONFIG}) cannot be loaded: {exc}. Point that field at the base "
            "model's folder on this machine."
        ) from exc
    PeftModel.from_pretrained(model, str(checkpoint)).merge_and_unload().save_pretrained(str(out_dir))
    # The torch backbone saves the tokenizer with every checkpoint; older folders fall back to the base's.
    has_tokenizer = (checkpoint / "tokenizer_config.json").is_file()
    AutoTokenizer.from_pretrained(str(checkpoint) if has_tokenizer else base).save_pretrained(str(out_dir))
