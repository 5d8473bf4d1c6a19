"""Checkpoints: `checkpoints/step_<n>/`, written whole or not at all.

A checkpoint folder holds the model in HuggingFace format (loadable with
`AutoModelForCausalLM.from_pretrained`; with LoRA, the adapter, loadable
with `peft.PeftModel.from_pretrained`), the tokenizer, `trainer_state.pt`
(optimizer, scheduler, RNG states) and `trainer_state.json` (step, data
position, what was trained). It is written into a hidden temporary folder
next to its final place and renamed into place last, so a run killed while
saving leaves no folder that looks like a checkpoint; `trainer_state.json`
must exist too for a folder to count.

With per-agent adapters (`agents.<name>.lora`) the folder holds, instead of
the model, each adapter trained this run in `adapters/<agent>/` (peft's
`adapter_config.json` and `adapter_model.safetensors`; fixed adapters stay
in the folders the config names), `trainer_state.pt` holds each adapter's
optimizer and scheduler states under `adapters.<agent>`, and
`trainer_state.json` lists the trained adapters (`adapters`). A run resumes
only with the same trained adapters (`adapters.check_resumed_adapters`).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from astuner.api import AstunerError, ConfigError
from astuner.training import ExperimentDir

STATE_JSON = "trainer_state.json"
STATE_PT = "trainer_state.pt"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_PARTIAL_DIR = re.compile(r"^(\.step_\d+-.+|\.old-step_\d+)$")


@dataclass
class Checkpoint:
    """A complete checkpoint folder and what its JSON state says."""

    path: Path
    step: int
    state: dict[str, Any]

    def tensors(self) -> dict[str, Any]:
        """Optimizer, scheduler and RNG states (`trainer_state.pt`).

        Read with `weights_only=True`: the file holds tensors, numbers,
        strings and containers only, so a crafted pickle cannot run code
        when a run resumes from a folder someone else wrote.
        """
        path = self.path / STATE_PT
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise AstunerError(
                f"Cannot read the trainer state '{path}': {type(exc).__name__}: {exc}. It holds only tensors "
                "and plain values when astuner writes it; resume from another checkpoint, or start fresh "
                "(trainer_common.resume: disable)."
            ) from exc


def rng_state() -> dict[str, Any]:
    """Every RNG's state as tensors and plain values (loadable with `weights_only=True`)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def ensure_finite(parameters: Iterable[torch.Tensor], step: int) -> None:
    """Refuse to write a checkpoint whose weights hold a NaN or an infinity."""
    bad = sum(1 for p in parameters if not bool(torch.isfinite(p.detach()).all()))
    if bad:
        raise AstunerError(
            f"Not writing the step {step} checkpoint: {bad} weight tensor(s) hold NaN or infinite values. "
            "The previous checkpoint is intact; resume from it (trainer_common.resume: auto) with a lower "
            "learning rate."
        )


def checkpoint_bytes(weights: Iterable[torch.Tensor], trainable: Iterable[torch.Tensor]) -> int:
    """About how large one checkpoint is: the saved weights plus AdamW's two moments per trained value."""
    seen: set[int] = set()
    saved = 0
    for tensor in weights:  # tied weights (embeddings and head) are one tensor, saved once
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            saved += tensor.numel() * tensor.element_size()
    moments = 2 * sum(t.numel() * 4 for t in trainable)
    return saved + moments


def ensure_space(folder: Path, needed: int) -> None:
    """Refuse to start a save (or a run) that the disk under `folder` cannot hold."""
    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    wanted = int(needed * 1.1) + (16 << 20)  # the estimate, 10% and the small files on top
    if free < wanted:
        raise AstunerError(
            f"Not enough disk space for a checkpoint in '{folder}': it needs about {_mb(wanted)}, "
            f"{_mb(free)} is free. Free space there, keep fewer checkpoints "
            "(trainer_common.keep_last_checkpoints), or move experiment_dir to a larger disk."
        )


def prune_checkpoints(root: Path, keep: int | None) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints of this run (None keeps all)."""
    if keep is None:
        return []
    steps = sorted((c for p in root.glob("step_*") if (c := read_checkpoint(p))), key=lambda c: c.step)
    old = [c.path for c in steps[: max(0, len(steps) - keep)]]
    for path in old:
        shutil.rmtree(path, ignore_errors=True)
    return old


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MB"


def save_checkpoint(
    root: Path,
    step: int,
    *,
    save_model: Any,
    tensors: dict[str, Any],
    state: dict[str, Any],
) -> Path:
    """Write `root/step_<step>/` atomically; `save_model(folder)` writes the model files.

    A failed write (a full disk, a permission) leaves no partial folder and is
    an error naming the checkpoint; earlier checkpoints are untouched.
    """
    final = root / f"step_{step}"
    try:
        return _write_checkpoint(root, final, step, save_model, tensors, state)
    except OSError as exc:
        raise AstunerError(
            f"Cannot write the checkpoint '{final}': {exc.strerror or exc} ({exc.filename or root}). "
            "Earlier checkpoints are intact; free space there and resume (trainer_common.resume: auto)."
        ) from exc


def _write_checkpoint(
    root: Path, final: Path, step: int, save_model: Any, tensors: dict[str, Any], state: dict[str, Any]
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".step_{step}-", dir=root))
    try:
        save_model(tmp)
        torch.save(tensors, tmp / STATE_PT)
        (tmp / STATE_JSON).write_text(json.dumps({**state, "step": step}, indent=2), encoding="utf-8")
        if final.exists():
            # Re-saving a step (after a resume) replaces the old folder only once the new one is whole.
            old = root / f".old-step_{step}"
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def read_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint at `path`, or None when it is not a complete checkpoint folder."""
    match = _STEP_DIR.match(path.name)
    state_file = path / STATE_JSON
    if not path.is_dir() or match is None or not state_file.is_file() or not (path / STATE_PT).is_file():
        return None
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return Checkpoint(path, int(match.group(1)), state)


def latest_checkpoint(runs: Iterable[Path]) -> Checkpoint | None:
    """The highest-step complete checkpoint written in any of `runs` (run folders), None if none is.

    This is the one lookup of this layout: resuming, `astuner eval
    --checkpoint latest`, a run's closing lines and `tune()`'s result ask it
    (the last three through the backbone's `latest_checkpoint`). Ties (the
    same step in two runs) go to the most recently written one.
    """
    found = [
        ckpt
        for run in runs
        for folder in ExperimentDir(run).checkpoints.glob("step_*")
        if (ckpt := read_checkpoint(folder)) is not None
    ]
    if not found:
        return None
    return max(found, key=lambda c: (c.step, (c.path / STATE_JSON).stat().st_mtime_ns))


def remove_partial_saves(checkpoints: Path) -> list[Path]:
    """Delete what a save killed midway left in a checkpoints folder (`.step_N-*`, `.old-step_N`)."""
    partial = [p for p in checkpoints.glob(".*step_*") if p.is_dir() and _PARTIAL_DIR.match(p.name)]
    for folder in partial:
        shutil.rmtree(folder, ignore_errors=True)
    return partial


def resume_from(resume: str, experiment_root: Path) -> Checkpoint | None:
    """What `trainer_common.resume` (`resume`) asks for: nothing, the latest checkpoint of the
    experiment's runs under `experiment_root` (`<experiment_dir>/<experiment_name>`), or a given folder.

    The folder a resumed checkpoint sits in is cleared of partial saves: a
    run killed while saving leaves its temporary folder behind.
    """
    ckpt = _resume_target(resume, experiment_root)
    if ckpt is not None:
        remove_partial_saves(ckpt.path.parent)
    return ckpt


def _resume_target(resume: str, experiment_root: Path) -> Checkpoint | None:
    if resume == "disable":
        return None
    if resume == "auto":
        return latest_checkpoint(experiment_root.glob("*"))
    ckpt = read_checkpoint(Path(resume))
    if ckpt is None:
        raise ConfigError(
            f"trainer_common.resume: '{resume}' is not a complete checkpoint folder (a "
            f"checkpoints/step_<n> folder with {STATE_JSON} and {STATE_PT}). Use 'auto' to continue "
            "from the latest checkpoint of this experiment, or 'disable' to start fresh."
        )
    return ckpt
