"""The experiment folder: `<experiment_dir>/<experiment>/<timestamp>/`.

It holds the resolved `config.yaml`, `astuner.log` (JSON lines), and what
backbones write: `rollouts/`, `metrics.jsonl`, `checkpoints/`; and the
readers of those records.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from astuner.core.trajectory import Trajectory
from astuner.errors import AstunerError
from astuner.finite_json import finite
from astuner.logs import warn_once
from astuner.record_lines import load_trajectory, trajectory_line


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
    def create(
        cls, root: str | Path, name: str, resolved_config: Mapping[str, Any], now: datetime | None = None
    ) -> ExperimentDir:
        """Make a fresh run folder `<root>/<name>/<timestamp>/` and write `resolved_config` into it.

        A run passes its config's `experiment_dir`, `experiment_name` and `to_yaml_dict()`.
        """
        stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
        base = Path(root) / name
        path = base / stamp
        suffix = 1
        while path.exists():
            suffix += 1
            path = base / f"{stamp}-{suffix}"
        path.mkdir(parents=True)
        experiment = cls(path)
        experiment.config_file.write_text(
            yaml.safe_dump(dict(resolved_config), sort_keys=False), encoding="utf-8"
        )
        return experiment


def append_lines(path: Path, lines: Iterable[str]) -> int:
    """Append JSON lines to `path`, each whole or not at all; flushed. Returns how many were written.

    A write that fails midway (a full disk) is cut back to the last whole
    line, and the error names the file: readers never see half a record.
    """
    count = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as out:
            for line in lines:
                whole = out.tell()
                try:
                    out.write(line.encode("utf-8") + b"\n")
                    out.flush()
                except OSError:
                    out.truncate(whole)
                    raise
                count += 1
    except OSError as exc:
        raise AstunerError(
            f"Cannot write records to '{path}': {exc.strerror or exc}. {count} new line(s) were written; "
            "the file holds only whole lines. Free space (or fix the permissions) and resume the run."
        ) from exc
    return count


def append_rows(path: Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Append each row as one line of strict JSON (`strict_json`), each whole or not at all."""
    return append_lines(path, (strict_json(row, path) for row in rows))


def strict_json(data: Any, where: Path, indent: int | None = None) -> str:
    """`data` as JSON that every reader takes, for the file `where`: NaN and infinities become null.

    JSON has no spelling for them; `json.dumps` would write `NaN` and
    `Infinity`, which strict readers (JavaScript's JSON.parse, jq) refuse.
    A judge's reward near the float limit makes a mean overflow, so each
    value replaced is warned of, once per file and key, by its key.
    """
    replaced: dict[str, float] = {}
    text = json.dumps(finite(data, "", replaced), indent=indent, allow_nan=False)
    for key, value in replaced.items():
        warn_once(
            f"non-finite {where} {key}",
            f"'{key}' is {value}, not a finite number (a reward near the float limit overflows a mean or "
            f"a spread); {where} keeps null for it, as JSON has no spelling for NaN or infinity.",
        )
    return text


def append_trajectories(path: Path, trajectories: Iterable[Trajectory]) -> int:
    """Append trajectories as JSON lines, each whole or not at all; returns how many were written.

    Each line is bounded per call (`astuner.record_lines`): token ids and
    log-probs whole, messages a call repeats kept once, long texts clipped.
    """
    return append_lines(path, (trajectory_line(trajectory) for trajectory in trajectories))


def read_trajectories(path: Path) -> list[Trajectory]:
    """Every trajectory of a rollout file, with the messages its lines keep once restored."""
    with path.open(encoding="utf-8") as lines:
        return [load_trajectory(line) for line in lines if line.strip()]


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of a `metrics.jsonl` file: none when it is missing or unreadable; bad lines are skipped.

    A run in progress may be writing its last line, so a line that does not
    parse is left out rather than failing the reader.
    """
    rows: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    rows.append(row)
    except OSError:
        pass
    return rows
