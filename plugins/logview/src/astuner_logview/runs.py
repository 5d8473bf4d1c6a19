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
20260101-120000`) keep working. The functions taking a `root` confine to
it; without one they confine to the run folder itself.

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

import yaml

from astuner.api import STATUS_FILE, ConfigError, RunStatus, load_yaml, read_metrics, read_status

_MAX_DEPTH = 3
_STEP_FILE = re.compile(r"step_(\d+)\.jsonl$")
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
    try:
        base = root.resolve()
        target = path.resolve()
        if target != base and base not in target.parents:
            return None
        return target if target.exists() else None
    except (OSError, RuntimeError):  # a symlink loop, a folder we may not read
        return None


def _run_file(run: Path, name: str, root: Path | None) -> Path | None:
    """`run / name` resolved, if it is a regular file inside `root` (default: the run folder)."""
    target = within(root if root is not None else run, run / name)
    return target if target is not None and target.is_file() else None


def is_run_dir(path: Path, root: Path | None = None) -> bool:
    """A run folder holds the resolved config or a rollouts folder (inside `root`, default the folder)."""
    base = root if root is not None else path
    rollouts = within(base, path / "rollouts")
    return _run_file(path, "config.yaml", base) is not None or (rollouts is not None and rollouts.is_dir())


def find_runs(root: Path) -> list[Path]:
    """Every run folder under `root` (itself included), newest name first within a folder.

    A folder that resolves outside `root` is skipped with everything in it.
    """
    found: list[Path] = []
    base = root.resolve()

    def walk(folder: Path, depth: int) -> None:
        if within(base, folder) is None:
            return
        if is_run_dir(folder, base):
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


def rollout_files(run: Path, root: Path | None = None) -> list[Path]:
    """A run's rollout files: `step_<n>.jsonl` by step, then any other `.jsonl` by name.

    Only files (and a `rollouts/` folder) resolving inside `root` (default:
    the run folder) are listed; each keeps its own name, under the resolved
    `rollouts/` folder.
    """
    base = root if root is not None else run
    folder = within(base, run / "rollouts")
    if folder is None or not folder.is_dir():
        return []
    try:
        names = [p for p in folder.iterdir() if p.suffix == ".jsonl"]
    except OSError:
        return []
    files = [p for p in names if (real := within(base, p)) is not None and real.is_file()]
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
    status: str  # running, finished, failed, killed; unknown for runs older than status.json
    status_reason: str


def read_config(run: Path, root: Path | None = None) -> dict[str, Any]:
    """The run's `astuner:` block from `config.yaml` ({} when missing, unreadable or outside `root`)."""
    path = _run_file(run, "config.yaml", root)
    if path is None:
        return {}
    try:
        # Bounded: a crafted config.yaml (an alias bomb) in a records folder must not hang the viewer.
        data = load_yaml(path.read_text(encoding="utf-8"), f"Config file '{path}'")
    except (OSError, ValueError, yaml.YAMLError, ConfigError):
        return {}
    block = data.get("astuner") if isinstance(data, dict) else None
    return block if isinstance(block, dict) else {}


def run_metrics(run: Path, root: Path | None = None) -> list[dict[str, Any]]:
    """The rows of the run's `metrics.jsonl` (none when it lies outside `root`); bad lines are skipped."""
    path = _run_file(run, "metrics.jsonl", root)
    return [] if path is None else read_metrics(path)


def run_time(run: Path, root: Path | None = None) -> str:
    """The run's start as `YYYY-mm-dd HH:MM:SS`: from its folder name, else its config's mtime."""
    match = _STAMP.match(run.name)
    if match:
        return datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").strftime("%Y-%m-%d %H:%M:%S")
    source = _run_file(run, "config.yaml", root) or run
    return datetime.fromtimestamp(source.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")


def run_info(root: Path, run: Path) -> RunInfo:
    """What the run list shows for `run`, reading only what resolves inside `root`."""
    status = read_status(run) if _run_file(run, STATUS_FILE, root) is not None else RunStatus("unknown")
    config = read_config(run, root)
    metrics = run_metrics(run, root)
    files = rollout_files(run, root)
    steps = {s for s in (step_of(f) for f in files) if s is not None}
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
    )
