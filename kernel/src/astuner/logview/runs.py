"""Finding runs under the viewer's PATH, and the few facts the run list shows.

PATH may be a record root (`launcher_record/`), one experiment
(`launcher_record/<experiment>/`) or one run (`.../<timestamp>/`). A run is
a folder that holds `config.yaml` or `rollouts/`; the search does not go
inside a run, nor deeper than three levels.

A run is named by its path relative to PATH (`math_agent/20260101-120000`,
or `.` when PATH is the run itself). Requests name runs and files this way
and are answered only for names found by the search, so nothing outside
PATH is ever read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

_MAX_DEPTH = 3
_STEP_FILE = re.compile(r"step_(\d+)\.jsonl$")
_STAMP = re.compile(r"^(\d{8}-\d{6})")


def is_run_dir(path: Path) -> bool:
    """A run folder holds the resolved config or a rollouts folder."""
    return (path / "config.yaml").is_file() or (path / "rollouts").is_dir()


def find_runs(root: Path) -> list[Path]:
    """Every run folder under `root` (itself included), newest name first within a folder."""
    found: list[Path] = []

    def walk(folder: Path, depth: int) -> None:
        if is_run_dir(folder):
            found.append(folder)
            return
        if depth == _MAX_DEPTH:
            return
        try:
            children = sorted((p for p in folder.iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True)
        except OSError:
            return
        for child in children:
            walk(child, depth + 1)

    walk(root, 0)
    return found


def step_of(file: Path) -> int | None:
    """The training step a rollout file holds (`step_12.jsonl` -> 12); None for `debug.jsonl` and others."""
    match = _STEP_FILE.search(file.name)
    return int(match.group(1)) if match else None


def rollout_files(run: Path) -> list[Path]:
    """A run's rollout files: `step_<n>.jsonl` by step, then any other `.jsonl` by name."""
    folder = run / "rollouts"
    if not folder.is_dir():
        return []
    files = [p for p in folder.iterdir() if p.suffix == ".jsonl" and p.is_file()]
    return sorted(files, key=lambda p: (step_of(p) is None, step_of(p) or 0, p.name))


def inside(base: Path, relative: str) -> Path | None:
    """`base / relative` if it resolves (symlinks followed) to an existing path inside `base`, else None."""
    if not relative or "\x00" in relative or Path(relative).is_absolute():
        return None
    base = base.resolve()
    target = (base / relative).resolve()
    if target != base and base not in target.parents:
        return None
    return target if target.exists() else None


@dataclass(frozen=True)
class RunInfo:
    """What the run list shows for one run."""

    id: str
    experiment: str
    time: str
    backbone: str
    model: str
    steps: int
    last_metrics: dict[str, Any]


def read_config(run: Path) -> dict[str, Any]:
    """The run's `astuner:` block from `config.yaml` ({} when missing or unreadable)."""
    try:
        data = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    block = data.get("astuner") if isinstance(data, dict) else None
    return block if isinstance(block, dict) else {}


def read_metrics(run: Path) -> list[dict[str, Any]]:
    """The rows of `metrics.jsonl`; unreadable lines (a line being written) are skipped."""
    rows: list[dict[str, Any]] = []
    try:
        with (run / "metrics.jsonl").open(encoding="utf-8") as lines:
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


def run_time(run: Path) -> str:
    """The run's start as `YYYY-mm-dd HH:MM:SS`: from its folder name, else its config's mtime."""
    match = _STAMP.match(run.name)
    if match:
        return datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").strftime("%Y-%m-%d %H:%M:%S")
    source = run / "config.yaml" if (run / "config.yaml").exists() else run
    return datetime.fromtimestamp(source.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")


def run_info(root: Path, run: Path) -> RunInfo:
    config = read_config(run)
    metrics = read_metrics(run)
    files = rollout_files(run)
    steps = {s for s in (step_of(f) for f in files) if s is not None}
    steps.update(int(row["step"]) for row in metrics if isinstance(row.get("step"), int))
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    relative = run.relative_to(root).as_posix()
    return RunInfo(
        id=relative,
        experiment=str(config.get("experiment_name") or (run.parent.name if relative != "." else run.name)),
        time=run_time(run),
        backbone=str(config.get("backbone", "")),
        model=str(model.get("path", "")),
        steps=len(steps),
        last_metrics=metrics[-1] if metrics else {},
    )
