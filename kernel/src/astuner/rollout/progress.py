"""The progress bar of a batch of rollouts: runs done, mean reward, tokens per second, errors."""

from __future__ import annotations

import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from astuner.core.trajectory import Trajectory


class RolloutProgress:
    """A rich progress bar: runs done, mean reward, generated tokens per second."""

    def __init__(self, total: int, tag: str, enabled: bool) -> None:
        self.enabled = enabled and total > 0
        self.started = time.perf_counter()
        self.rewards: list[float] = []
        self.tokens = 0
        self.errors = 0
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "reward {task.fields[reward]}  {task.fields[tps]} tok/s  errors {task.fields[errors]}"
            ),
            TimeElapsedColumn(),
            transient=False,
            disable=not self.enabled,
        )
        self._task = self._progress.add_task(tag, total=total, reward="-", tps="-", errors=0)

    def __enter__(self) -> RolloutProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(None, None, None)

    def advance(self, trajectory: Trajectory) -> None:
        self.tokens += sum(len(c.response_ids) for c in trajectory.calls)
        if trajectory.error:
            self.errors += 1
        elif isinstance(trajectory.reward, (int, float)):
            self.rewards.append(float(trajectory.reward))
        elif isinstance(trajectory.reward, list) and trajectory.reward:
            self.rewards.append(float(sum(trajectory.reward)))
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        mean = f"{sum(self.rewards) / len(self.rewards):.3f}" if self.rewards else "-"
        self._progress.update(
            self._task, advance=1, reward=mean, tps=f"{self.tokens / elapsed:.0f}", errors=self.errors
        )
