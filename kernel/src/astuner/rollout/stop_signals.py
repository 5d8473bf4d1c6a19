"""SIGINT and SIGTERM while a run owns them: the first stops the run, a second exits at once.

Taken only where the process is astuner's own (see `astuner.rollout.watchdog`
for when and why). The first signal prints one line and asks the loop to
stop: a loop callback raises KeyboardInterrupt (SIGINT) or SystemExit(143)
(SIGTERM). Should the loop be blocked, the watchdog asks `interrupt()` to
unblock it. A second signal exits with `os._exit(130 or 143)`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from contextlib import suppress
from types import FrameType
from typing import Any, NoReturn

STOP_GRACE_S = 1.0
"""How long a stop signal waits for the loop before the blocking call is interrupted."""
RETRY_S = 0.1
"""How soon the watchdog may interrupt again for the same stop."""
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name))

Handler = Callable[[int, FrameType | None], Any] | int | None


class LoopBlocked(BaseException):
    """Raised inside a call that kept the event loop blocked past its rollout's timeout, or at a stop.

    A BaseException, as asyncio.CancelledError is: a workflow's `except Exception` must not swallow it.
    """


class StopSignals:
    """The stop signals of one event loop's runs, shared by every runner on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._handler = self._on_signal
        self._previous: dict[int, Handler] = {}
        self._users = 0
        self._signum: int | None = None
        self._at = 0.0
        self._retry_at = 0.0
        self._interrupts = 0
        self._interrupted: tuple[Any, float] | None = None
        self._delivered = False

    @property
    def pending(self) -> bool:
        """A stop signal came and the loop has not acted on it yet."""
        return self._signum is not None and not self._delivered

    def due(self, now: float) -> bool:
        """Whether a pending stop has waited long enough for the watchdog to unblock the loop."""
        return self.pending and now - self._at >= STOP_GRACE_S and now >= self._retry_at

    def take(self) -> None:
        """Handle SIGINT and SIGTERM from now on (nested: the first caller takes them)."""
        self._users += 1
        if self._users > 1:
            return
        self._previous = {}
        for sig in _STOP_SIGNALS:
            current = signal.getsignal(sig)
            # A handler from outside Python cannot be put back; an ignored signal stays ignored.
            if current is None or current == signal.SIG_IGN or current == self._handler:
                continue
            self._previous[sig] = current
            signal.signal(sig, self._handler)

    def give_back(self) -> None:
        """Put the previous handlers back once the last caller is done, unless a stop is under way."""
        self._users -= 1
        if self._users > 0 or self._signum is not None:  # once stopping, a second signal exits
            return
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._handler:
                signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous = {}

    def interrupt(self, now: float, beat: float, blocked: float) -> NoReturn:
        """A stop is waiting for a blocked loop: unblock it, so the loop gets to the stop.

        Several rollouts may block in turn before the loop reaches the stop
        callback: each gets `LoopBlocked`, a retry apart. Code that swallows
        it and blocks again gets the stop exception itself.
        """
        try:
            task = asyncio.current_task(self.loop)
        except RuntimeError:
            task = None
        where = (task, beat)
        again = where == self._interrupted
        self._interrupted = where
        self._retry_at = now + RETRY_S
        if again:
            self._delivered = True
            raise _stop_exception(self._signum or signal.SIGTERM)
        if self._interrupts == 0:
            _say(f"astuner: a blocking call has held the event loop for {blocked:.0f} s; interrupting it")
        self._interrupts += 1
        name = signal.Signals(self._signum or signal.SIGTERM).name
        raise LoopBlocked(
            f"Stopped by {name}: the workflow had blocked the event loop for {blocked:.1f} s "
            "(a blocking call such as time.sleep inside async code)."
        )

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._signum is not None:
            _say(f"astuner: second {name}: exiting now, without cleaning up")
            os._exit(128 + signum)
        self._signum, self._at = signum, time.monotonic()
        _say(f"astuner: {name} received, stopping the run (a second Ctrl-C or SIGTERM exits at once)")
        try:
            self.loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop is closed: stop the plain way
            self._delivered = True
            raise _stop_exception(signum) from None

    def _deliver(self) -> None:
        """On the loop: end `run_forever`; asyncio then cancels the rollouts and unwinds the stack."""
        if not self.pending:
            return
        self._delivered = True
        raise _stop_exception(self._signum or signal.SIGTERM)


def _stop_exception(signum: int) -> BaseException:
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    return SystemExit(128 + signum)


def _say(line: str) -> None:
    """One line on stderr, straight to the file descriptor: safe inside a signal handler."""
    with suppress(OSError):
        os.write(2, f"\n{line}\n".encode())
