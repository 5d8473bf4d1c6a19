"""The viewer's read side: runs under PATH, their rollout indexes, filtered pages, one trajectory.

Everything a request names (a run, a rollout file, a file of a run) is
looked up among what was found under PATH; anything else is `NotFound`.
Every path is resolved (symlinks followed) and confined to the resolved
PATH (see `astuner_logview.runs`); what lies outside is `NotFound` with the
same message as what does not exist.

A line that does not validate as a `Trajectory` is not listed but counted
in `bad_lines`, like a line that is not JSON. The index checks every field
but the calls when it reads a line (parsing the calls would cost a hundred
times more); a line whose calls do not validate is found out when it is
first read whole (opened, or read as a member of an opened trajectory's
group), and is then dropped from the list and counted the same way. The
request for it answers 404, never a server error.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from astuner.api import RunRecords, Trajectory
from astuner_logview.index import RolloutIndex, Summary
from astuner_logview.runs import find_runs, inside, printable, run_info, within
from astuner_logview.tokens import TokenizerCache, trajectory_view

_EAGER_INDEX_BYTES = 64 << 20


class NotFound(LookupError):
    """A run, file or trajectory that is not under PATH."""


@dataclass
class Filters:
    """Trajectory list filters; None means "any".

    `agent` keeps trajectories in which that agent made a call; with it, the
    reward bounds apply to that agent's own reward where the judge scored
    agents on their own (`Trajectory.agent_rewards`), else to the reward.
    """

    step: str | None = None
    task: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    success: bool | None = None
    madness: bool | None = None
    error: bool | None = None
    agent: str | None = None

    def match(self, s: Summary) -> bool:
        if self.task and self.task.lower() not in s.task_id.lower():
            return False
        score = s.agent_rewards.get(self.agent, s.score) if self.agent else s.score
        if self.min_reward is not None and (score is None or score < self.min_reward):
            return False
        if self.max_reward is not None and (score is None or score > self.max_reward):
            return False
        if self.success is not None and s.is_success is not self.success:
            return False
        if self.madness is not None and bool(s.madness) != self.madness:
            return False
        if self.error is not None and (s.error is not None) != self.error:
            return False
        return not (self.agent and self.agent not in s.agents)


def step_label(file: Path) -> str:
    """How a rollout file is named in the step filter: its step number, else its stem (`debug`)."""
    step = RunRecords.step_of(file)
    return str(step) if step is not None else printable(file.stem)


class RecordStore:
    """Runs under `root`, with one cached, incrementally refreshed index per rollout file."""

    def __init__(self, root: Path, tokenizer: str | None = None) -> None:
        self.root = root.resolve()
        self.tokenizer_override = tokenizer
        self.tokenizers = TokenizerCache()
        self._indexes: dict[Path, RolloutIndex] = {}
        self._lock = threading.Lock()

    def runs(self) -> dict[str, Path]:
        """Run id (path relative to the root) -> folder, searched afresh."""
        return {printable(path.relative_to(self.root).as_posix()): path for path in find_runs(self.root)}

    def run(self, run_id: str) -> Path:
        path = self.runs().get(run_id)
        if path is None:
            raise NotFound(f"no run {run_id!r} under {self.root}")
        return path

    def run_list(self) -> list[dict[str, Any]]:
        """Every run, newest first, with `mean_reward`: the last mean judge reward metric, else the mean
        over its rollouts."""
        out = []
        for path in self.runs().values():
            info = asdict(run_info(self.root, path))
            info["mean_reward"] = self._mean_reward(path, info["last_metrics"])
            out.append(info)
        return sorted(out, key=lambda info: info["time"], reverse=True)

    def _mean_reward(self, run: Path, last_metrics: dict[str, Any]) -> float | None:
        for key in ("train/reward_mean", "reward/mean"):
            value = last_metrics.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        files = RunRecords(run, self.root).trajectory_files()
        # Large unopened runs are not read just to fill the list; opening the run indexes them.
        if sum(f.stat().st_size for f in files if f not in self._indexes) > _EAGER_INDEX_BYTES:
            return None
        scores = [s.score for f in files for s in self.index(f).refresh() if s.score is not None]
        return sum(scores) / len(scores) if scores else None

    def index(self, file: Path) -> RolloutIndex:
        """The index of a listed rollout file, reading its resolved path (checked to be under the root)."""
        with self._lock:
            if file not in self._indexes:
                real = within(self.root, file)
                if real is None:
                    raise NotFound(f"no rollout file {file.name!r}")
                self._indexes[file] = RolloutIndex(real)
            return self._indexes[file]

    def records(self, run_id: str) -> RunRecords:
        """The reader of a run's records, confined to the root."""
        return RunRecords(self.run(run_id), self.root)

    def rollout_file(self, run_id: str, name: str) -> Path:
        for file in self.records(run_id).trajectory_files():
            if printable(file.name) == name:
                return file
        raise NotFound(f"no rollout file {name!r} in run {run_id!r}")

    def tokenizer_path(self, config: dict[str, Any]) -> str:
        """The tokenizer for a run: the override, else the run's `model.path` ("" if none)."""
        return self.tokenizer_override or str((config.get("model") or {}).get("path") or "")

    def page(self, run_id: str, filters: Filters, offset: int, limit: int) -> dict[str, Any]:
        """One page of matching trajectories across the run's rollout files, in file then line order."""
        records = self.records(run_id)
        self.tokenizers.prefetch(self.tokenizer_path(records.config()))
        files = records.trajectory_files()
        items: list[dict[str, Any]] = []
        total = trajectories = 0
        agents: set[str] = set()
        bad_lines = 0
        for file in files:
            index = self.index(file)
            summaries = index.refresh()
            bad_lines += len(index.bad_lines)
            trajectories += len(summaries)
            for s in summaries:
                agents.update(s.agents)
            if filters.step is not None and step_label(file) != filters.step:
                continue
            for s in summaries:
                if not filters.match(s):
                    continue
                if offset <= total < offset + limit:
                    items.append({"file": printable(file.name), "step": step_label(file), **s.as_dict()})
                total += 1
        return {
            "total": total,
            "offset": offset,
            "limit": limit,
            "items": items,
            "steps": [step_label(f) for f in files],
            "agents": sorted(agents),
            "trajectories": trajectories,
            "bad_lines": bad_lines,
        }

    def trajectory(self, run_id: str, file_name: str, line: int) -> dict[str, Any]:
        """The full view of line `line` of a rollout file: conversation, samples, advantage."""
        records = self.records(run_id)
        file = self.rollout_file(run_id, file_name)
        index = self.index(file)
        summary = index.find(line)
        trajectory = None if summary is None else _load(index, summary)
        if trajectory is None:
            if index.is_bad(line):
                raise NotFound(
                    f"line {line} of {file_name} is not a valid trajectory; it is skipped and counted"
                )
            raise NotFound(f"no trajectory on line {line} of {file_name}")
        group = [trajectory]
        if trajectory.group_id:
            for s in list(index.summaries):
                if s.group_id == trajectory.group_id and s.line != line:
                    member = _load(index, s)
                    if member is not None:
                        group.append(member)
        config = records.config()
        tokenizer_path = self.tokenizer_path(config)
        tokenizer, problem = (None, "no model.path in config.yaml")
        if tokenizer_path:
            tokenizer, problem = self.tokenizers.get(tokenizer_path)
        estimator, gamma = records.advantage_settings()
        view = trajectory_view(trajectory, group, tokenizer, estimator=estimator, gamma=gamma)
        view.update(
            file=file_name,
            line=line,
            step=step_label(file),
            tokenizer={"path": tokenizer_path, "error": problem},
        )
        return view

    def metrics(self, run_id: str) -> dict[str, Any]:
        """The rows of the run's `metrics.jsonl`, what each of their keys means (as declared:
        label, description, unit, good, group), and the health checks they crossed, with on how
        many steps each did."""
        records = self.records(run_id)
        rows = records.metrics()
        keys = [key for row in rows for key in row if key != "step"]
        return {"rows": rows, "metrics": RunRecords.metric_declarations(keys), "health": records.health(rows)}

    def run_file(self, run_id: str, name: str) -> Path:
        """A regular file inside the run folder and the root, resolved; else NotFound (`..`, links out)."""
        target = inside(self.run(run_id), name)
        if target is None or within(self.root, target) is None or not target.is_file():
            raise NotFound(f"no file {name!r} in run {run_id!r}")
        return target


def _load(index: RolloutIndex, summary: Summary) -> Trajectory | None:
    """The trajectory a summary describes; None, the line dropped and counted, if it does not validate."""
    try:
        return RunRecords.read_trajectory(index.read(summary))
    except ValueError:  # pydantic's ValidationError, for bad calls the index does not parse
        index.discard(summary.line)
        return None
