"""math-verify with a time limit that holds on every thread: the work runs in child processes.

A model's answer can make sympy compute for hours inside one C call that
holds the GIL (`10^{10^{10}}`, `(10^{10})!`, a tower of powers): every
thread of the process stops, and math-verify's own limit (SIGALRM) can be
set only on the main thread, while judges run in thread pools and Ray
workers. So the symbolic work goes to a few long-lived children
(`worker.py`, loaded once, about a millisecond a request); a child that
does not answer within the limit is killed, by the pid this process started,
and a fresh one starts loading at once. Numeric answers never come here
(`compare.equivalent` decides them by hand in microseconds).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from astuner.api import AstunerError, warn_once

# Checks that run at once, each in its own child (about 150 MB each once math-verify is loaded).
_SIZE = max(1, min(4, os.cpu_count() or 1))
# Loading sympy on a busy machine; not counted against any check's limit.
_START_LIMIT_S = 120.0
_COMMAND = [sys.executable, "-m", "astuner_judge_math.worker"]


class _Worker:
    """One child and the bytes it sent that no reply has consumed yet; used by one thread at a time."""

    def __init__(self) -> None:
        # The child imports what this process imports, wherever its sys.path came from (Ray, pytest).
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - the child writes it for as long as it lives
        try:
            self.proc = subprocess.Popen(
                _COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
            )
        except OSError as exc:
            self._stderr.close()
            raise _start_error(f"could not be started ({exc})") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin, self._stdout = self.proc.stdin, self.proc.stdout.fileno()
        self._poll = select.poll()
        self._poll.register(self._stdout, select.POLLIN)
        self._buffer = b""
        self.ready = False

    def ask(self, op: str, args: tuple[str, ...], limit_s: float) -> tuple[bool, Any]:
        """(True, result), or (False, None) when the child did not answer within `limit_s`."""
        if not self.ready:
            if self._line(time.monotonic() + _START_LIMIT_S) is None:
                raise self._not_ready()
            self.ready = True
        try:
            self._stdin.write(json.dumps({"op": op, "args": args, "limit_s": limit_s}).encode() + b"\n")
            self._stdin.flush()
        except OSError:  # it died since its last answer
            return False, None
        line = self._line(time.monotonic() + limit_s)
        return (False, None) if line is None else (True, json.loads(line)["result"])

    def _line(self, deadline: float) -> bytes | None:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self._poll.poll(left * 1000):
                return None
            chunk = os.read(self._stdout, 1 << 16)
            if not chunk:  # it exited
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _not_ready(self) -> AstunerError:
        try:  # its output ends a moment before it does
            code: int | None = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
            self.proc.kill()
            self.proc.wait()
        self._stderr.seek(0)
        said = self._stderr.read().decode(errors="replace").strip().splitlines()
        self._finish()
        return _start_error(
            f"sent nothing for {_START_LIMIT_S:.0f} s" if code is None else f"exited with code {code}",
            said[-1].strip() if said else "",  # a traceback's last line names the error
        )

    def stop(self) -> None:
        """End the child at once; its state is unknown."""
        if self.proc.poll() is None:
            self.proc.kill()
        self._finish()

    def close(self) -> None:
        """Let an idle child end by closing its input; kill it if it lingers."""
        try:
            self._stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self._finish()

    def _finish(self) -> None:
        self.proc.wait()
        self._stdin.close()
        self.proc.stdout.close()  # type: ignore[union-attr]
        self._stderr.close()


def _start_error(what: str, stderr: str = "") -> AstunerError:
    said = f" Its last words: {stderr}." if stderr else ""
    return AstunerError(
        f"math judge: its math-verify process (`{' '.join(_COMMAND)}`) {what} before it was ready.{said} "
        f"The judge needs math-verify in this interpreter: `{sys.executable} -m pip install math-verify`."
    )


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self._slots = threading.BoundedSemaphore(_SIZE)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []

    def ask(self, op: str, args: tuple[str, ...], limit_s: float) -> tuple[bool, Any]:
        # A child is either idle or held by a thread with a slot: at most _SIZE children.
        with self._slots:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            worker = worker or _Worker()
            answered, result = False, None
            try:
                answered, result = worker.ask(op, args, limit_s)
            finally:
                if answered:
                    self._give_back(worker)
                elif worker.ready:  # it overran (or died): replace it now, so it loads while we go on
                    worker.stop()
                    self._give_back(_Worker())
                else:
                    worker.stop()
        if not answered:
            warn_once(
                "judge-math-overrun",
                "math judge: a symbolic check ran past its limit and counts as no match; "
                "its process was killed and replaced",
                limit_s=limit_s,
            )
        return answered, result

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def ask(op: str, *args: str, limit_s: float) -> tuple[bool, Any]:
    """Run `worker.OPS[op](*args)` in a child: (True, its result), or (False, None) past `limit_s` seconds.

    The first request of a process, and the first after an overrun, also
    waits for a child to load math-verify (about a second), not counted in
    `limit_s`.
    """
    global _pool
    with _pool_lock:
        # After a fork the children belong to the parent: this process starts its own.
        if _pool is None or _pool.pid != os.getpid():
            _pool = _Pool()
        pool = _pool
    return pool.ask(op, args, limit_s)


def _close_pool() -> None:
    if _pool is not None and _pool.pid == os.getpid():
        _pool.close()


atexit.register(_close_pool)
