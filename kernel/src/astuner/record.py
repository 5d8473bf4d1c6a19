"""The experiment folder: `<experiment_dir>/<experiment>/<timestamp>/`.

It holds the resolved `config.yaml`, `astuner.log` (JSON lines), and what
backbones write: `rollouts/`, `metrics.jsonl`, `checkpoints/`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from astuner.config import AstunerConfig
from astuner.core.trajectory import Trajectory


@dataclass(frozen=True)
class ExperimentDir:
    """One run's folder and the well-known paths inside it."""

    path: Path

    @property
    def config_file(self) -> Path:
        return self.path / "config.yaml"

    @property
    def log_file(self) -> Path:
        return self.path / "astuner.log"

    @property
    def rollouts(self) -> Path:
        return self.path / "rollouts"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @classmethod
    def create(cls, config: AstunerConfig, now: datetime | None = None) -> ExperimentDir:
        """Make a fresh run folder and write the resolved config into it."""
        stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
        base = Path(config.experiment_dir) / config.experiment_name
        path = base / stamp
        suffix = 1
        while path.exists():
            suffix += 1
            path = base / f"{stamp}-{suffix}"
        path.mkdir(parents=True)
        experiment = cls(path)
        experiment.config_file.write_text(
            yaml.safe_dump(config.to_yaml_dict(), sort_keys=False), encoding="utf-8"
        )
        return experiment


def append_trajectories(path: Path, trajectories: Iterable[Trajectory]) -> int:
    """Append trajectories as JSON lines, flushed, and return how many were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("a", encoding="utf-8") as out:
        for trajectory in trajectories:
            out.write(trajectory.model_dump_json() + "\n")
            count += 1
        out.flush()
    return count


def read_trajectories(path: Path) -> list[Trajectory]:
    """Every trajectory of a rollout file."""
    with path.open(encoding="utf-8") as lines:
        return [Trajectory.model_validate_json(line) for line in lines if line.strip()]
