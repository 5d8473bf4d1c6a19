"""`TuneResult`: what a `tune()` run left behind, read back from its experiment folder."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astuner.record import ExperimentDir

_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class TuneResult:
    """The run folder, its step metrics and its last checkpoint.

    `history` holds every line of `metrics.jsonl` (one per step, each with
    its `step`), `metrics` the last one; both are empty for a run that does
    not train (backbone `debug`). `checkpoint` is the highest
    `checkpoints/step_<n>/` folder (HuggingFace format with backbone
    `torch`), or None when none was saved. Paths are absolute.
    """

    experiment_dir: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: Path | None = None

    @classmethod
    def read(cls, experiment: ExperimentDir) -> TuneResult:
        history = []
        if experiment.metrics_file.is_file():
            lines = experiment.metrics_file.read_text(encoding="utf-8").splitlines()
            history = [json.loads(line) for line in lines if line.strip()]
        return cls(
            experiment_dir=experiment.path.resolve(),
            metrics=history[-1] if history else {},
            history=history,
            checkpoint=last_checkpoint(experiment.checkpoints.resolve()),
        )


def last_checkpoint(checkpoints: Path) -> Path | None:
    """The `step_<n>` folder with the highest n (backbones write them whole, then rename into place)."""
    if not checkpoints.is_dir():
        return None
    steps = {
        int(match.group(1)): folder
        for folder in checkpoints.iterdir()
        if folder.is_dir() and (match := _STEP_DIR.match(folder.name))
    }
    return steps[max(steps)] if steps else None
