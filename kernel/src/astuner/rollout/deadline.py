"""A rollout's deadline: cut at `rollout.rollout_timeout`, and abandoned if it will not stop.

`asyncio.wait_for` cancels its task at the timeout and then waits for it to
end. A workflow that catches the cancellation and goes on (an `except
BaseException`, a bare `except:`, a retry loop that swallows
`asyncio.CancelledError`) held the whole step that way for as long as it
liked. Here the workflow runs in a task of its own whose outermost frame is
`_Driven`, which passes everything between the task and the workflow on as
`await` would. At the deadline the task is cancelled; a workflow that has
not ended `ABANDON_AFTER_S` later is abandoned: `_Driven` stops passing
things on and ends the task itself, without resuming the workflow, and the
runner records the rollout as a timeout and goes on. The abandoned
workflow is then closed at once, with the watchdog's ejection armed on its
frames (`astuner.rollout.watchdog.arm_ejection`): the innermost of its
frames raises as soon as GeneratorExit reaches it, before its `except` and
`finally` blocks run (a frame further out that catches that runs its
handler once and is closed the same way by the next attempt). Left to the
garbage collector, its code would run whenever and wherever the coroutine
happened to be collected, and a loop on `except BaseException` would spin
there.

A workflow that blocks the event loop cannot be cancelled at all: the loop
watchdog interrupts it (`astuner.rollout.watchdog`), and abandons it the
same way should it catch the interrupt and block again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
from collections.abc import Coroutine, Generator, Iterator
from types import FrameType
from typing import Any, Generic, TypeVar

from astuner.rollout.stop_signals import LoopBlocked
from astuner.rollout.watchdog import ABANDONED_MESSAGE, WatchedRollout, arm_ejection, watch_rollout

T = TypeVar("T")

ABANDON_AFTER_S = 2.0
"""How long a cancelled rollout may take to end before it is abandoned."""
_CLOSE_ATTEMPTS = 16
"""Frames of an abandoned workflow that catch the ejection one after another, at the most."""

# Abandoned tasks, held until they end: asyncio keeps only a weak reference to a running task.
_ABANDONED: set[asyncio.Task[Any]] = set()


class RolloutTimeout(Exception):
    """A rollout ran past its deadline; the message says how it ended and what to change."""


async def run_within_deadline(work: Coroutine[Any, Any, T], rollout_id: str, timeout: float) -> T:
    """Await `work` in a task of its own; raise `RolloutTimeout` once it has run `timeout` seconds.

    Whatever `work` raises within its time is raised here (`LoopBlocked` where the watchdog
    interrupted it). The caller's own cancellation is passed on to `work`, which gets
    `ABANDON_AFTER_S` to end.
    """
    with watch_rollout(rollout_id, timeout) as rollout:
        context = contextvars.copy_context()
        task = context.run(_start, _Driven(work, rollout), rollout)
        try:
            return await _outcome(task, rollout, timeout)
        finally:
            if rollout.abandoned:
                context.run(_close_abandoned, work, rollout)


async def _outcome(task: asyncio.Task[T], rollout: WatchedRollout, timeout: float) -> T:
    """The task's result, or the `RolloutTimeout` saying how it ended once `timeout` had passed."""
    timed_out = False
    try:
        await asyncio.wait({task}, timeout=timeout)
        if not task.done():
            timed_out = True
            task.cancel()
            await asyncio.wait({task}, timeout=ABANDON_AFTER_S)
            if not task.done():
                _abandon(task, rollout)
                raise RolloutTimeout(_ignored_cancellation(timeout))
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task}, timeout=ABANDON_AFTER_S)
        if not task.done():
            _abandon(task, rollout)
        raise
    cancelled = (
        f"Timeout: the rollout ran longer than {timeout:g} s (rollout.rollout_timeout) and was cancelled."
    )
    if task.cancelled():
        # Abandoned by the watchdog, it went back to awaiting: its cancellation ended it at once.
        raise RolloutTimeout(ABANDONED_MESSAGE.format(timeout=timeout) if rollout.abandoned else cancelled)
    ended = task.exception()
    if timed_out and ended is None:
        raise RolloutTimeout(
            f"Timeout: the rollout ran longer than {timeout:g} s (rollout.rollout_timeout); the "
            "workflow caught the cancellation and went on (an agent that swallows "
            "asyncio.CancelledError), so its result is not used."
        )
    if timed_out and not isinstance(ended, LoopBlocked):
        raise RolloutTimeout(cancelled) from ended
    return task.result()


def _start(driven: _Driven[T], rollout: WatchedRollout) -> asyncio.Task[T]:
    """In the rollout's own context (a copy): the watchdog interrupts only the task started here."""
    rollout.enter()
    return asyncio.ensure_future(_drive(driven))


async def _drive(driven: _Driven[T]) -> T:
    return await driven


def _abandon(task: asyncio.Task[Any], rollout: WatchedRollout) -> None:
    """Give up on a task that ignores its cancellation: `_Driven` ends it at its next step."""
    rollout.abandoned = True
    task.cancel()
    _ABANDONED.add(task)
    task.add_done_callback(_forget)


def _close_abandoned(work: Coroutine[Any, Any, Any], rollout: WatchedRollout) -> None:
    """Close an abandoned workflow now, in its rollout's context, without running its code.

    Left to the garbage collector, closing it would run its `except` and `finally` blocks whenever
    and wherever it is collected, and one that loops on `except BaseException` would spin there.
    Armed, the first frame GeneratorExit reaches raises `LoopBlocked` at once; an outer frame that
    catches that is reached by the next attempt.
    """
    for _ in range(_CLOSE_ATTEMPTS):
        if inspect.getcoroutinestate(work) == inspect.CORO_CLOSED:
            break
        arm_ejection(rollout, _await_chain(work))
        # Ejected (LoopBlocked), or a frame caught GeneratorExit and awaited again (RuntimeError).
        with contextlib.suppress(LoopBlocked, RuntimeError):
            work.close()
    rollout.restore_trace()


def _await_chain(work: Any) -> Iterator[FrameType]:
    """The frames of a suspended coroutine and of what it awaits, outermost first."""
    while work is not None:
        frame = getattr(work, "cr_frame", None) or getattr(work, "gi_frame", None)
        if frame is not None:
            yield frame
        work = getattr(work, "cr_await", None) or getattr(work, "gi_yieldfrom", None)


def _forget(task: asyncio.Task[Any]) -> None:
    _ABANDONED.discard(task)
    if not task.cancelled():
        task.exception()  # already recorded as the rollout's timeout: asyncio need not log it


def _ignored_cancellation(timeout: float) -> str:
    return (
        f"Timeout: the rollout ran longer than {timeout:g} s (rollout.rollout_timeout) and did not end "
        f"when cancelled, nor {ABANDON_AFTER_S:g} s later: the workflow catches asyncio.CancelledError "
        "(an `except BaseException`, or a bare `except:`) and goes on. It was abandoned: its result is "
        "not used and the step did not wait for it. Catch Exception, not BaseException, or re-raise "
        "asyncio.CancelledError."
    )


class _Driven(Generic[T]):
    """Awaits `work` as `await` would, until the rollout is abandoned: then it ends the task itself."""

    def __init__(self, work: Coroutine[Any, Any, T], rollout: WatchedRollout) -> None:
        self._work = work
        self._rollout = rollout

    def __await__(self) -> Generator[Any, Any, T]:
        work = self._work
        value: Any = None
        thrown: BaseException | None = None
        while True:
            try:
                step = work.send(value) if thrown is None else work.throw(thrown)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            try:
                value, thrown = (yield step), None
            except GeneratorExit:
                if not self._rollout.abandoned:
                    work.close()
                raise
            except BaseException as exc:  # the task's cancellation: the workflow's to handle, until abandoned
                if self._rollout.abandoned:
                    raise
                value, thrown = None, exc
