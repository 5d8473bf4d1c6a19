"""The loop watchdog: rollout timeouts and Ctrl-C keep working when a workflow blocks the event loop.

The problem. Rollouts, the gateway and the engine calls share one asyncio
loop in the main thread (see `astuner.rollout.gateway`). A workflow that
makes a blocking call on it (`time.sleep`, `requests.get`, a long CPU loop)
stops the loop and everything it would do: `asyncio.wait_for` never fires
`rollout.rollout_timeout`, and SIGINT/SIGTERM, turned into flags or loop
callbacks, are never acted on; only SIGKILL ended such a run.

The design. While a runner uses the loop, the loop beats a heartbeat (a
`call_later` callback every 0.25 s) and a daemon thread watches it. The
thread never touches the loop or the rollouts: all it can do is interrupt
the main thread with `signal.pthread_kill(main, SIGUSR1)`. Python runs the
SIGUSR1 handler in the main thread, inside the blocking call (`time.sleep`,
socket reads and lock waits return EINTR; pure-Python loops are stopped
between bytecodes), and the handler raises `LoopBlocked` right there: the
workflow's own `finally` blocks run, the runner records the rollout as an
error saying what went wrong, and the other rollouts go on.
`LoopBlocked` is a `BaseException`, as `asyncio.CancelledError` is, so a
retry loop's `except Exception: continue` does not swallow it.

A workflow that catches even that (`except BaseException`) and blocks again
gets a second interrupt a second later, and with it is abandoned: the
handler arms a trace function (`sys.settrace`) on the interrupted frames,
which raises `LoopBlocked` again at the first line the workflow runs after
catching it, the `except` body included, and then unsets itself (as Python
unsets a trace function that raises). A workflow that catches it once more
one frame further out and blocks there again is peeled the same way, a
second at a time; one that goes back to awaiting is abandoned by
`astuner.rollout.deadline`. The tracer a caller had (coverage, say) is put
back when the rollout ends.

It fires only when it must:

- The thread fires only when the heartbeat is at least 1 s late and some
  running rollout is past its deadline (its start plus `rollout_timeout`,
  the moment `asyncio.wait_for` would have cut it). It reads the heartbeat
  again right before firing, and the handler reads it a third time.
- The handler raises only inside a rollout past its own deadline: the
  running rollout is a context variable set around the workflow (tasks the
  workflow spawns inherit it). Anywhere else (the runner, the judge, the
  engine, asyncio itself, this module, a rollout still within its time, a
  debugger stopped at a breakpoint) it returns, the interrupted call
  resumes (PEP 475), and the thread waits for the loop to move again.
- It is armed only while rollouts run; heartbeat, thread and handler exist
  only while a runner uses the loop, and the previous SIGUSR1 handler comes
  back after. A SIGUSR1 handler installed outside Python (such as
  `faulthandler.register`) is never replaced: the watchdog then stays off.
- Only a loop in the main thread can be interrupted (Python runs signal
  handlers there): a runner in another thread (a foreign engine's worker)
  gets no watchdog and no signal handling, as before.

Signals. The gateway's uvicorn no longer captures SIGINT and SIGTERM, so a
library caller (`astuner.tune()`, a notebook, a foreign engine's worker)
keeps its own handlers, Python's default KeyboardInterrupt included (it too
is raised inside the blocking call). Where the process is astuner's own (the
`astuner` command calls `own_stop_signals()`), `RolloutRunner.run` takes
SIGINT and SIGTERM while it runs (`astuner.rollout.stop_signals`; a signal
the process ignores stays ignored, as under nohup). The first one prints one
line and stops the run: a loop callback raises KeyboardInterrupt (SIGINT) or
SystemExit(143) (SIGTERM), so asyncio cancels the rollouts and the stack
closes the gateway and engines as usual. If the loop is blocked and has not
run that callback within 1 s, the watchdog interrupts the blocking call with
`LoopBlocked` (and, should the workflow swallow that and block again, with
the stop exception itself). A second SIGINT or SIGTERM exits at once,
`os._exit(130 or 143)` after one line, whatever the process is doing, for
the rest of its life.

Limits. Python can only interrupt code that returns to the interpreter: a
C extension that blocks while holding the GIL, or retries EINTR without
checking for signals, is waited for, even by the second Ctrl-C; SIGKILL
remains. `rollout_timeout` still counts wall time: a rollout blocked by
another rollout's blocking call may time out once the loop comes back.

Why not run each workflow in a thread of its own: engine calls would have
to be marshalled back to the loop, breakpoints in workflow code would no
longer stop in the main thread (`debug` backbone), and a blocked thread
still cannot be stopped, only abandoned.
"""

from __future__ import annotations

import asyncio
import bdb
import math
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from types import FrameType
from typing import Any, ClassVar

from astuner.logs import warn_once
from astuner.rollout import stop_signals
from astuner.rollout.stop_signals import Handler, LoopBlocked, StopSignals

HEARTBEAT_S = 0.25
"""How often the loop proves it is alive."""
BLOCKED_S = 1.0
"""A loop whose heartbeat is this late counts as blocked."""
_TICK_S = 0.1
_INTERRUPT = getattr(signal, "SIGUSR1", None)

_owns_stop_signals = False
# Never interrupted: this module, the stop signals, and the driver of a rollout's task.
_MACHINERY = frozenset({__name__, stop_signals.__name__, "astuner.rollout.deadline"})


def blocked_message(blocked_s: float, timeout_s: float) -> str:
    return (
        f"Timeout: the workflow blocked the event loop for {blocked_s:.1f} s (a blocking call such as "
        f"time.sleep inside async code) and was interrupted after rollout.rollout_timeout "
        f"({timeout_s:g} s). A blocking call stalls every rollout: use `await asyncio.sleep(...)` and "
        "async clients, or run blocking work in a thread with `await asyncio.to_thread(...)`."
    )


ABANDONED_MESSAGE = (
    "Timeout: the workflow ran past rollout.rollout_timeout ({timeout:g} s) and caught the interrupt "
    "that stops it (an `except BaseException` or a bare `except:` around a blocking call) to block the "
    "event loop again, so it was abandoned: its result is not used and the step did not wait for it. "
    "Catch Exception, not BaseException, around calls that may have to be stopped, and use "
    "`await asyncio.sleep(...)` and async clients instead of blocking calls."
)


@dataclass(eq=False)
class WatchedRollout:
    """One rollout's deadline, and whether it ignored being stopped and was given up on."""

    rollout_id: str
    timeout: float
    deadline: float
    interrupts: int = 0
    abandoned: bool = False
    traced: bool = False  # the ejecting tracer was armed: the caller's tracer comes back at the end
    previous_trace: Any = None

    @classmethod
    def starting_now(cls, rollout_id: str, timeout: float) -> WatchedRollout:
        return cls(rollout_id, timeout, time.monotonic() + timeout)

    def enter(self) -> None:
        """Mark the current context (the rollout's own task, started from it) as this rollout's."""
        _CURRENT.set(self)

    def restore_trace(self) -> None:
        """Put back the tracer the ejection replaced (Python unset it, or ours is still armed)."""
        if self.traced and sys.gettrace() in (None, _eject_on_next_line):
            sys.settrace(self.previous_trace)
        self.traced = False


_CURRENT: ContextVar[WatchedRollout | None] = ContextVar("astuner_watched_rollout", default=None)


def own_stop_signals() -> None:
    """The process is astuner's own (the command line): runs take SIGINT and SIGTERM as described above."""
    global _owns_stop_signals
    _owns_stop_signals = True


def watch_run() -> AbstractContextManager[None]:
    """Around a whole `RolloutRunner.run`: the watchdog, and SIGINT/SIGTERM if `own_stop_signals()`."""
    watchdog = LoopWatchdog.for_running_loop()
    return nullcontext() if watchdog is None else watchdog.session(stop_signals=_owns_stop_signals)


def watch_rollout(rollout_id: str, timeout: float) -> AbstractContextManager[WatchedRollout]:
    """Around one rollout: interrupted where it blocks the loop past `timeout` seconds, once the task
    that runs its workflow has called `enter()` on the rollout this gives."""
    watchdog = LoopWatchdog.for_running_loop()
    if watchdog is None:
        return nullcontext(WatchedRollout.starting_now(rollout_id, timeout))
    return watchdog.rollout(rollout_id, timeout)


class LoopWatchdog:
    """The watchdog of one event loop running in the main thread; shared by every runner on it."""

    _instances: ClassVar[dict[int, LoopWatchdog]] = {}

    @classmethod
    def for_running_loop(cls) -> LoopWatchdog | None:
        """The running loop's watchdog; None where Python cannot interrupt it (not the main thread)."""
        if _INTERRUPT is None or not hasattr(signal, "pthread_kill"):
            return None
        if threading.current_thread() is not threading.main_thread():
            return None
        loop = asyncio.get_running_loop()
        watchdog = cls._instances.get(id(loop))
        if watchdog is None or watchdog.loop is not loop:
            watchdog = cls._instances[id(loop)] = cls(loop)
        return watchdog

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._main = threading.main_thread().ident or 0
        self._lock = threading.Lock()
        self._users = 0
        self._rollouts: set[WatchedRollout] = set()
        self._beat = time.monotonic()
        self._beat_handle: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._quit = threading.Event()
        self._fired = False  # an interrupt is on its way to the handler
        self._hold = (math.nan, 0.0)  # (heartbeat, until): no timeout interrupt for this blocked stretch
        self._interrupt_handler = self._on_interrupt
        self._previous_interrupt: Handler = None
        self._stops = StopSignals(loop)

    # -- sessions ---------------------------------------------------------------------------

    @contextmanager
    def session(self, *, stop_signals: bool = False) -> Iterator[None]:
        """The watchdog runs while at least one session is open; `stop_signals` takes SIGINT/SIGTERM."""
        self._acquire()
        try:
            if stop_signals:
                self._stops.take()
            try:
                yield
            finally:
                if stop_signals:
                    self._stops.give_back()
        finally:
            self._release()

    @contextmanager
    def rollout(self, rollout_id: str, timeout: float) -> Iterator[WatchedRollout]:
        """Arms the watchdog for one rollout, whose deadline is `timeout` seconds from now."""
        with self.session():
            record = WatchedRollout.starting_now(rollout_id, timeout)
            with self._lock:
                self._rollouts.add(record)
            try:
                yield record
            finally:
                with self._lock:
                    self._rollouts.discard(record)
                record.restore_trace()

    def _acquire(self) -> None:
        self._users += 1
        if self._users > 1 or self._thread is not None:
            return
        current = signal.getsignal(_INTERRUPT)
        if current is None:
            warn_once(
                "watchdog off",
                "the loop watchdog is off: SIGUSR1 has a handler from outside Python, so a workflow "
                "that blocks the event loop cannot be interrupted",
            )
            return
        if current != self._interrupt_handler:
            self._previous_interrupt = current
            signal.signal(_INTERRUPT, self._interrupt_handler)
        self._beat = time.monotonic()
        self._beat_handle = self.loop.call_later(HEARTBEAT_S, self._heartbeat)
        self._quit.clear()
        self._thread = threading.Thread(target=self._watch, name="astuner-loop-watchdog", daemon=True)
        self._thread.start()

    def _release(self) -> None:
        self._users -= 1
        if self._users > 0:
            return
        if self._thread is not None:
            self._quit.set()
            self._thread.join()
            self._thread = None
        if self._beat_handle is not None:
            self._beat_handle.cancel()
            self._beat_handle = None
        # An interrupt still on its way finds our (then idle) handler rather than SIGUSR1's default.
        if not self._fired and signal.getsignal(_INTERRUPT) == self._interrupt_handler:
            signal.signal(_INTERRUPT, self._previous_interrupt or signal.SIG_DFL)
        if self._instances.get(id(self.loop)) is self:
            del self._instances[id(self.loop)]

    def _heartbeat(self) -> None:
        self._beat = time.monotonic()
        self._beat_handle = self.loop.call_later(HEARTBEAT_S, self._heartbeat)

    # -- the watching thread ----------------------------------------------------------------

    def _watch(self) -> None:
        while not self._quit.wait(_TICK_S):
            self._check()

    def _check(self) -> None:
        if self._fired:
            return
        now, beat = time.monotonic(), self._beat
        if now - beat < BLOCKED_S:
            return
        if not (self._stops.due(now) or self._timeout_due(now, beat)):
            return
        if time.monotonic() - self._beat < BLOCKED_S:  # the loop came back meanwhile
            return
        self._fired = True
        try:
            signal.pthread_kill(self._main, _INTERRUPT)  # type: ignore[arg-type]
        except (OSError, ValueError):
            self._fired = False

    def _timeout_due(self, now: float, beat: float) -> bool:
        held_beat, until = self._hold
        if held_beat == beat and now < until:
            return False
        with self._lock:
            deadlines = [rollout.deadline for rollout in self._rollouts]
        return bool(deadlines) and now >= min(deadlines)

    # -- the main thread's handlers ---------------------------------------------------------

    def _on_interrupt(self, signum: int, frame: FrameType | None) -> None:
        """SIGUSR1, in the main thread: raise where the loop is blocked, if it still is and may be."""
        if not self._fired:  # not ours
            if callable(self._previous_interrupt):
                self._previous_interrupt(signum, frame)
            return
        self._fired = False
        now, beat = time.monotonic(), self._beat
        blocked = now - beat
        if self._users == 0 or blocked < BLOCKED_S:
            return
        if self._stops.pending:
            self._stops.interrupt(now, beat, blocked)
        rollout = _CURRENT.get()
        if rollout is None or rollout not in self._rollouts or _machinery(frame) or _debugging():
            self._hold = (beat, math.inf)  # not a rollout's own code: wait for the loop to move
            return
        if now < rollout.deadline:
            self._hold = (beat, rollout.deadline)
            return
        self._hold = (beat, now + BLOCKED_S)  # should it swallow this one, the next comes in a second
        rollout.interrupts += 1
        if rollout.interrupts == 1:
            raise LoopBlocked(blocked_message(blocked, rollout.timeout))
        # It caught the first one and blocked again: give up on it, and make the catching useless.
        rollout.abandoned = True
        arm_ejection(rollout, _callers(frame))
        raise LoopBlocked(ABANDONED_MESSAGE.format(timeout=rollout.timeout))


def _callers(frame: FrameType | None) -> Iterator[FrameType]:
    """The interrupted frame and its callers, down to the first of asyncio's or astuner's machinery."""
    while frame is not None and not _machinery(frame):
        yield frame
        frame = frame.f_back


def arm_ejection(rollout: WatchedRollout, frames: Iterable[FrameType]) -> None:
    """Mark `frames` of an abandoned rollout and trace them, so the first line they run raises."""
    if not rollout.traced:
        rollout.previous_trace, rollout.traced = sys.gettrace(), True
    sys.settrace(_eject_on_next_line)
    for frame in frames:
        if not _machinery(frame):
            frame.f_trace = _eject_on_next_line


def _eject_on_next_line(frame: FrameType, event: str, arg: Any) -> Any:
    """The trace function of an abandoned rollout: a frame it marked raises as soon as it runs a line
    or is resumed; any other code (astuner's own, on the rollout's behalf) is left alone."""
    rollout = _CURRENT.get()
    if rollout is None or not rollout.abandoned or frame.f_trace is not _eject_on_next_line:
        return None
    if event in ("line", "call"):
        raise LoopBlocked(ABANDONED_MESSAGE.format(timeout=rollout.timeout))
    return _eject_on_next_line  # the 'exception' event comes before the frame's own handler


def _machinery(frame: FrameType | None) -> bool:
    """Whether the interrupted code is asyncio's or the watchdog's own: never raise there."""
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name in _MACHINERY or name == "asyncio" or name.startswith("asyncio.")


def _debugging() -> bool:
    """A debugger stopped in the main thread (pdb and friends, or debugpy) is not a blocked loop."""
    return isinstance(getattr(sys.gettrace(), "__self__", None), bdb.Bdb) or "pydevd" in sys.modules
