"""Finding runs under the viewer's PATH, and the few facts the run list shows.

PATH may be a record root (`launcher_record/`), one experiment
(`launcher_record/<experiment>/`) or one run (`.../<timestamp>/`). A run is
a folder that holds `config.yaml` or `rollouts/`; the search does not go
inside a run, nor deeper than three levels.

A run is named by its path relative to PATH (`math_agent/20260101-120000`,
or `.` when PATH is the run itself). Requests name runs and files this way
and are answered only for names found by the search, so nothing outside
PATH is ever read.

Symlinks are followed only while they stay inside PATH: every folder and
file is resolved (`Path.resolve()`) and used only if it lies inside the
resolved PATH. A run folder, experiment folder, `rollouts/`, rollout file,
`config.yaml` or `metrics.jsonl` that is a link leading out is treated as
absent, exactly like a name that does not exist, so that a link dropped into
the records (`latest -> ~`) cannot serve the user's home, and an answer never
tells whether something outside exists. Links inside PATH (`latest ->
20260101-120000`) keep working. A run's own files are read through
`astuner.api.RunRecords` confined to PATH, which applies the same rule.

Names need not be UTF-8 (a run named after a config file `caf\xe9.yaml`):
each is shown and requested in its `printable` form, with such bytes
spelled `\xe9`, so that JSON can carry it and a request can name it back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from astuner.api import RunRecords

_MAX_DEPTH = 3
_STAMP = re.compile(r"^(\d{8}-\d{6})")


def printable(text: str) -> str:
    """`text` as valid Unicode, bytes that are not UTF-8 written `\\xe9` (other lone surrogates `\\ud800`).

    Python keeps such bytes of a file name as lone surrogates, which no
    UTF-8 encoder (so no JSON answer) accepts.
    """
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte (JSON's "\\ud800")
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def within(root: Path, path: Path) -> Path | None:
    """`path` resolved (symlinks followed) if it exists and lies inside `root` resolved, else None."""
    return RunRecords(root).resolve(path)


def find_runs(root: Path) -> list[Path]:
    """Every run folder under `root` (itself included), newest name first within a folder.

    A folder that resolves outside `root` is skipped with everything in it.
    """
    found: list[Path] = []
    base = root.resolve()

    def walk(folder: Path, depth: int) -> None:
        if within(base, folder) is None:
            return
        if RunRecords(folder, base).is_run():
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


def inside(base: Path, relative: str) -> Path | None:
    """`base / relative` if it resolves (symlinks followed) to an existing path inside `base`, else None."""
    if not relative or "\x00" in relative or Path(relative).is_absolute():
        return None
    return within(base, base / relative)


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
    status: str  # running, finished, failed, killed; unknown for runs older than status.json
    status_reason: str
    command: str  # the astuner command that made the run (run, eval, sft, ...); "" before status.json had it


def run_time(run: Path, root: Path | None = None) -> str:
    """The run's start as `YYYY-mm-dd HH:MM:SS`: from its folder name, else its config's mtime."""
    match = _STAMP.match(run.name)
    if match:
        return datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").strftime("%Y-%m-%d %H:%M:%S")
    source = RunRecords(run, root).file("config.yaml") or run
    return datetime.fromtimestamp(source.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")


def run_info(root: Path, run: Path) -> RunInfo:
    """What the run list shows for `run`, reading only what resolves inside `root`."""
    reader = RunRecords(run, root)
    status = reader.status()
    config = reader.config()
    metrics = reader.metrics()
    files = reader.trajectory_files()
    steps = {s for s in (RunRecords.step_of(f) for f in files) if s is not None}
    steps.update(int(row["step"]) for row in metrics if isinstance(row.get("step"), int))
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    relative = printable(run.relative_to(root).as_posix())
    return RunInfo(
        id=relative,
        experiment=str(config.get("experiment_name") or (run.parent.name if relative != "." else run.name)),
        time=run_time(run, root),
        backbone=str(config.get("backbone", "")),
        model=str(model.get("path", "")),
        steps=len(steps),
        last_metrics=metrics[-1] if metrics else {},
        status=status.state,
        status_reason=status.reason,
        command=status.command,
    )
