"""Tagged breakpoints: `bp("TAG")` stops only where the run enabled the tag.

    from astuner import bp          # the seeds' spelling, `from vsdb import bp`, works too
    bp("JUDGE")                     # stops under `astuner run --db 'JUDGE|PARSE' ...`

`--db` puts the tags in the environment (`ASTUNER_DB_TAGS`), so Ray workers
and subprocesses of the run see them too. In the run's own process an
enabled tag opens pdb in the terminal (the debug backbone: no Ray). In a Ray
worker it calls `breakpoint()`, which Ray's distributed debugger serves
(`RAY_DEBUG=1`, set by `--db`; attach with the Ray Distributed Debugger VS
Code extension). A tag that is not enabled costs one environment lookup.
"""

from __future__ import annotations

import functools
import os
import pdb
import sys

DB_TAGS_ENV = "ASTUNER_DB_TAGS"


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
    print(f"astuner: breakpoint '{tag}' (pdb: 'c' to go on, 'q' to stop the run)", file=sys.stderr)
    pdb.Pdb().set_trace(caller)


def _in_ray_worker() -> bool:
    ray = sys.modules.get("ray")
    if ray is None:
        return False
    try:
        # is_initialized() first: get_runtime_context() starts a local Ray cluster when there is none.
        return bool(ray.is_initialized()) and ray.get_runtime_context().worker.mode == ray.WORKER_MODE
    except Exception:  # an old or partial Ray: not a worker we can tell
        return False
