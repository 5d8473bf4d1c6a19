"""The progress of a batch of rollouts: runs done, mean reward, tokens per second, errors, elapsed.

On a terminal it is a rich bar that redraws itself in place. Where it cannot
(output redirected to a file or a pipe, a dumb terminal), rich would draw
the bar once, when the batch ends: a redirected run of fifteen minutes said
nothing for fifteen minutes. There the same figures also go out as a plain
log line every `ASTUNER_PROGRESS_EVERY_S` seconds (default 30; on stderr
and in the run's `astuner.log`) until that closing draw, from a thread of
their own, so that a line comes even while a workflow blocks the
event loop or a training step holds the main thread (`progress_heartbeat`,
which `astuner sft` uses for its steps too).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType

from rich import get_console
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from astuner.core.trajectory import Trajectory
from astuner.errors import AstunerError
from astuner.logs import get_logger

PROGRESS_ENV = "ASTUNER_PROGRESS_EVERY_S"
DEFAULT_EVERY_S = 30.0


def progress_every_s(default: float = DEFAULT_EVERY_S) -> float:
    """Seconds between plain progress lines: `ASTUNER_PROGRESS_EVERY_S` when set, else `default`."""
    raw = os.environ.get(PROGRESS_ENV, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise AstunerError(
            f"{PROGRESS_ENV}={raw!r}: give the seconds between progress lines as a positive number "
            f"(e.g. {PROGRESS_ENV}=10), or unset it for every {DEFAULT_EVERY_S:g} s."
        )
    return value


def redraws_in_place(console: Console) -> bool:
    """Whether a rich bar on `console` updates as it goes (a terminal, or Jupyter), rather than
    being drawn once at its end (a file, a pipe, a dumb terminal)."""
    return console.is_jupyter or (console.is_terminal and not console.is_dumb_terminal)


class Heartbeat:
    """Calls `say()` every `every_s` seconds from a daemon thread, between `__enter__` and `__exit__`.

    A thread, not an asyncio task: the line must come while a workflow blocks
    the event loop, or a long training step keeps the main thread busy.
    `beats` counts the calls made so far.
    """

    def __init__(self, every_s: float, say: Callable[[], None]) -> None:
        self.every_s = every_s
        self.beats = 0
        self._say = say
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="astuner-progress", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._say()
            self.beats += 1


def progress_heartbeat(say: Callable[[], None]) -> AbstractContextManager[object]:
    """A context that calls `say` every `ASTUNER_PROGRESS_EVERY_S` seconds (default 30) off a
    terminal (output to a file or a pipe), from a thread, and does nothing on a terminal, where a
    bar or the loop's own lines show the progress.

    For a loop whose own lines may be minutes apart, `astuner sft`'s steps:

        with progress_heartbeat(lambda: log.info("sft progress", step=f"{done}/{total}")):
            for step in steps:
                ...
    """
    if redraws_in_place(get_console()):
        return nullcontext()
    return Heartbeat(progress_every_s(), say)


class RolloutProgress:
    """Runs done, mean reward, generated tokens per second: a rich bar, redrawn as runs end on a
    terminal, else drawn once at the end after a plain line every `progress_every_s()` seconds."""

    def __init__(self, total: int, tag: str, enabled: bool) -> None:
        self.enabled = enabled and total > 0
        self.total = total
        self.tag = tag
        self.started = time.perf_counter()
        self.rewards: list[float] = []
        self.tokens = 0
        self.errors = 0
        self.done = 0
        self._lock = threading.Lock()
        # Off a terminal the bar is still drawn once, at the end: the batch's closing figures.
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
        self._heartbeat = progress_heartbeat(self.say) if self.enabled else nullcontext()

    def __enter__(self) -> RolloutProgress:
        self.started = time.perf_counter()
        self._progress.__enter__()
        self._heartbeat.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        # The plain lines stop before the closing draw, so none comes after the batch's last figures.
        self._heartbeat.__exit__(None, None, None)
        self._progress.__exit__(None, None, None)

    def advance(self, trajectory: Trajectory) -> None:
        """Count one finished run."""
        with self._lock:
            self.done += 1
            self.tokens += sum(len(c.response_ids) for c in trajectory.calls)
            if trajectory.error:
                self.errors += 1
            elif isinstance(trajectory.reward, (int, float)):
                self.rewards.append(float(trajectory.reward))
            elif isinstance(trajectory.reward, list) and trajectory.reward:
                self.rewards.append(float(sum(trajectory.reward)))
            reward, tps = self._figures()
        self._progress.update(self._task, advance=1, reward=reward, tps=tps, errors=self.errors)

    def say(self) -> None:
        """Log the plain progress line: runs done of the batch, mean reward so far, tok/s, elapsed."""
        with self._lock:
            reward, tps = self._figures()
            done, errors = self.done, self.errors
        get_logger().info(
            "rollout progress",
            tag=self.tag,
            done=f"{done}/{self.total}",
            reward_mean=reward,
            tokens_per_s=tps,
            errors=errors,
            elapsed_s=round(time.perf_counter() - self.started, 1),
        )

    def _figures(self) -> tuple[str, str]:
        """The mean reward so far ("-" before any) and the generated tokens per second."""
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        mean = f"{sum(self.rewards) / len(self.rewards):.3f}" if self.rewards else "-"
        return mean, f"{self.tokens / elapsed:.0f}"
