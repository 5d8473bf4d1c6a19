"""Tagged breakpoints: `bp("TAG")` stops only where the run enabled the tag.

    from astuner import bp          # the seeds' spelling, `from vsdb import bp`, works too
    bp("JUDGE")                     # stops under `astuner run --db 'JUDGE|PARSE' ...`

`--db` puts the tags in the environment (`ASTUNER_DB_TAGS`), so Ray workers
and subprocesses of the run see them too. In the run's own process an
enabled tag opens pdb in the terminal (the debug backbone: no Ray). In a Ray
worker it calls `breakpoint()`, which Ray's distributed debugger serves
(`RAY_DEBUG=1`, set by `--db`; attach with the Ray Distributed Debugger VS
Code extension). A tag that is not enabled costs one environment lookup.

pdb's `q` (or `exit`, or end of input) at such a stop stops the run, as the
prompt says: pdb's own BdbQuit would only fail that one rollout (and a
workflow's `except Exception` could swallow it), and the next rollout would
stop again. It becomes `StoppedAtBreakpoint`, a KeyboardInterrupt, which
ends the run as Ctrl-C does (asyncio re-raises it out of the loop; the run's
status reads `killed`, stopped by the user); any later `bp()` of the run
raises it again instead of stopping.
"""

from __future__ import annotations

import asyncio
import bdb
import functools
import os
import pdb
import sys
from types import FrameType
from typing import Any

DB_TAGS_ENV = "ASTUNER_DB_TAGS"


class StoppedAtBreakpoint(KeyboardInterrupt):
    """pdb's `q` at a `bp()` stop: the run ends as it does on Ctrl-C; the message says where."""


# The stop a `q` asked for, and the event loop it was asked in: that run is
# ending. A later run in the same process (a notebook's next tune()) runs on a loop of its own.
_quit_at: tuple[asyncio.AbstractEventLoop, StoppedAtBreakpoint] | None = None


def enable_tags(tags: str) -> frozenset[str]:
    """Enable the `|`-separated `tags` for this process and those it starts; returns them."""
    enabled = parse_tags(tags)
    os.environ[DB_TAGS_ENV] = "|".join(sorted(enabled))
    # Ray's own debugger switches: breakpoint() in a worker waits for the VS Code extension, and
    # an uncaught error in a task stops there too (as the seeds' launcher sets them).
    os.environ.setdefault("RAY_DEBUG", "1")
    os.environ.setdefault("RAY_DEBUG_POST_MORTEM", "1")
    return enabled


@functools.lru_cache(maxsize=8)
def parse_tags(tags: str) -> frozenset[str]:
    return frozenset(t.strip() for t in tags.split("|") if t.strip())


def bp(tag: str) -> None:
    """Stop here when `tag` is enabled (`--db`); otherwise do nothing."""
    tags = os.environ.get(DB_TAGS_ENV)
    if not tags or tag not in parse_tags(tags):
        return
    caller = sys._getframe(1)
    if _in_ray_worker():
        breakpoint()  # Ray's hook: the distributed debugger
        return
    if _quit_at is not None and _quit_at[0] is _running_loop():
        raise StoppedAtBreakpoint(*_quit_at[1].args)
    print(f"astuner: breakpoint '{tag}' (pdb: 'c' to go on, 'q' to stop the run)", file=sys.stderr)
    _RunPdb(tag).set_trace(caller)


class _RunPdb(pdb.Pdb):
    """pdb whose quit stops the whole run rather than the one rollout it stopped in."""

    def __init__(self, tag: str) -> None:
        super().__init__()
        self.tag = tag

    def trace_dispatch(self, frame: FrameType, event: str, arg: Any) -> Any:
        try:
            return super().trace_dispatch(frame, event, arg)
        except bdb.BdbQuit:
            global _quit_at
            stop = StoppedAtBreakpoint(f"stopped by the user: 'q' at breakpoint '{self.tag}'")
            loop = _running_loop()
            # Remembered only for the rollouts of a running loop; a stop outside any loop ends the
            # caller at once, and must not stop later loop-less bp() calls of the process.
            _quit_at = (loop, stop) if loop is not None else None
            print(f"astuner: stopping the run ('q' at breakpoint '{self.tag}')", file=sys.stderr)
            raise stop from None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _in_ray_worker() -> bool:
    ray = sys.modules.get("ray")
    if ray is None:
        return False
    try:
        # is_initialized() first: get_runtime_context() starts a local Ray cluster when there is none.
        return bool(ray.is_initialized()) and ray.get_runtime_context().worker.mode == ray.WORKER_MODE
    except Exception:  # an old or partial Ray: not a worker we can tell
        return False
